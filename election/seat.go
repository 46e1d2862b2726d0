package election

import (
	"context"
	"database/sql"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// seat is the leader row as read with the database clock.
type seat struct {
	now      time.Time
	exists   bool
	leader   uuid.UUID // uuid.Nil when vacant
	term     int64
	expires  time.Time
	acquired time.Time
}

func (s seat) live() bool { return s.leader != uuid.Nil && s.expires.After(s.now) }

// seatHint is who held the seat at the last reading and until when, on
// this process's monotonic clock: the lease's remaining time by the
// database clock, added to the local time before the reading was sent
// (ends, no later than the lease's end) and to the local time after its
// answer came (endsBy, no earlier than it, but for the clocks' rates). It
// only chooses Elect's first step and when an Elector tries at the lease's
// end; the database clock decides.
type seatHint struct {
	read   bool // the seat was read (or a handoff said it is changing hands)
	leader uuid.UUID
	ends   time.Time
	endsBy time.Time
}

// noteSeat records what a reading of the seat, sent at local time sent
// and answered by local time answered, showed.
func (e *Election) noteSeat(s seat, sent, answered time.Time) {
	h := seatHint{read: true}
	if s.live() {
		left := s.expires.Sub(s.now)
		h = seatHint{read: true, leader: s.leader, ends: sent.Add(left), endsBy: answered.Add(left)}
	}
	e.mu.Lock()
	e.seen = h
	e.mu.Unlock()
}

// forgetSeat drops the last reading as if it had shown the seat free (a
// handoff: the seat is changing hands): the next Elect takes the locked
// path, which waits for the vacating transaction.
func (e *Election) forgetSeat() {
	e.mu.Lock()
	e.seen = seatHint{read: true}
	e.mu.Unlock()
}

// seatEnds returns the local monotonic times between which the lease
// leader held at the last reading ends (seatHint's ends and endsBy), if
// that reading showed leader's live lease.
func (e *Election) seatEnds(leader uuid.UUID) (ends, endsBy time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen.leader == uuid.Nil || e.seen.leader != leader {
		return time.Time{}, time.Time{}, false
	}
	return e.seen.ends, e.seen.endsBy, true
}

// heldByAnother reports whether Elect by id should read the seat unlocked
// before it may lock it: when the Election has not read the seat yet (a
// new candidate usually finds it held), or the last reading showed a live
// lease of another candidate than id, which may have ended since or been
// renewed. So a follower never locks a seat whose lease is live.
func (e *Election) heldByAnother(id uuid.UUID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.seen.read || (e.seen.leader != uuid.Nil && e.seen.leader != id)
}

// readSeat reads the leader row with the given lock, and the database
// clock after the lock was granted (dialect.Statements.SelectLeader).
func (e *Election) readSeat(ctx context.Context, conn gorm.ConnPool, lock dialect.Lock) (seat, error) {
	var (
		now, exp, acq dialect.Time
		leader        uuid.NullUUID
		term          sql.NullInt64
	)
	sent := time.Now()
	if err := conn.QueryRowContext(ctx, e.q.SelectLeader[lock], e.namespace).Scan(&now, &leader, &term, &exp, &acq); err != nil {
		return seat{}, err
	}
	s := seat{now: now.Time, exists: term.Valid, term: term.Int64, expires: exp.Time, acquired: acq.Time}
	if leader.Valid && exp.Valid {
		s.leader = leader.UUID
	}
	e.noteSeat(s, sent, time.Now())
	return s, nil
}

// lease is the seat as the protocol reports it: vacant when expired.
func (e *Election) lease(s seat) Lease {
	if !s.live() {
		return Lease{Namespace: e.namespace}
	}
	return Lease{Namespace: e.namespace, Leader: s.leader, Term: s.term, ExpiresAt: s.expires, AcquiredAt: s.acquired}
}

// remember records the lease a call left id with: kept while id holds it,
// for Elect's one-statement renewal (see cached), and dropped otherwise.
func (e *Election) remember(id uuid.UUID, l Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.HeldBy(id) {
		e.held[id] = l
	} else {
		delete(e.held, id)
	}
}

func (e *Election) forget(id uuid.UUID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.held, id)
}

func (e *Election) cached(id uuid.UUID) (Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.held[id]
	return l, ok
}

// heldReading is a seat a batch take found held by another candidate,
// with the local times around the statement (noteSeat's sent and
// answered).
type heldReading struct {
	seat           seat
	sent, answered time.Time
}
