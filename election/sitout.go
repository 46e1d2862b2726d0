package election

import (
	"time"

	"github.com/google/uuid"
)

// The sit-out: after a give-up (Resign, a balancing handover) or another
// candidate's vacate, a machine stays out of the seat for a while, so the
// seat goes where it was handed. These are its rules: how a sit-out begins,
// which handoff wake-up ends it early, and how a try started by a stale
// wake-up resumes it.

// sitOutLocked keeps the machine from trying for d from now.
func (m *machine) sitOutLocked(now time.Time, d time.Duration, lenient bool) {
	if until := now.Add(d); until.After(m.holdUntil) {
		m.holdUntil, m.lenient, m.probe = until, lenient, 0
	}
}

// wokenLocked reports whether a handoff wake-up should make the machine
// try now. A sit-out after the machine's own give-up ends when another
// candidate vacates the seat (it has held the seat since); a sit-out after
// a vacate by someone else, or balancing, waits its time out.
func (m *machine) wokenLocked(s signal, now time.Time) bool {
	if m.closed || m.giving > 0 || m.cur != nil {
		return false
	}
	if now.Before(m.holdUntil) {
		if !m.lenient || s.kind != sigWake || s.vacated == uuid.Nil {
			return false
		}
		// The wake-up may announce a vacate from before the give-up, or
		// the same vacate twice (in the process, and through the
		// database): the try checks first (probeLocked).
		m.probe, m.probeEnd = m.gaveUp, m.holdUntil
		m.holdUntil = time.Time{}
	}
	return true
}

// probeLocked returns, and forgets, the check a try must make first when a
// handoff wake-up ended the machine's sit-out after its own give-up
// (wokenLocked): the term it gave up (0: no check), and the end of that
// sit-out. The try reads the seat (Election.wakeStale); when the seat is
// still in that term, no candidate has taken it since, and the wake-up
// was stale: the machine does not try, and sits out again until then
// (staleWakeLocked). Without the check, a late or repeated wake-up from an
// earlier handoff made a candidate that had just resigned take the seat
// back.
func (m *machine) probeLocked() (gaveUp int64, end time.Time) {
	gaveUp, end = m.probe, m.probeEnd
	m.probe, m.probeEnd = 0, time.Time{}
	return gaveUp, end
}

// staleWakeLocked resumes, until end, the sit-out a stale wake-up ended.
func (m *machine) staleWakeLocked(end time.Time) {
	if end.After(m.holdUntil) {
		m.holdUntil, m.lenient = end, true
	}
}
