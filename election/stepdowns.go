package election

import (
	"log/slog"
	"time"
)

// msgTrust is the log line of a step-down at the end of a trust window.
const msgTrust = "election: no renewal within the trust window; stepping down before the lease can expire"

// stepDownsWindow is how long a Group's trust-window step-downs after a
// first one are gathered into one log line.
const stepDownsWindow = time.Second

// stepDownsNamed is how many namespaces the gathered line names.
const stepDownsNamed = 5

// stepDowns gathers a Group's trust-window step-downs into few log lines.
// When a Group's rounds are slow, the trust windows of the seats one round
// renewed end together: a line for each namespace was thousands a second
// at 40,000 x 16 (28,359 in a two-minute run), each written under the
// box's lock while the round that would renew the others waited for it.
// The first step-down after a quiet window is logged by itself, with its
// namespace and term, as an Elector logs its one; those within the next
// stepDownsWindow are counted, and logged in one line when it ends, with
// their number and the first few namespaces. Every step-down still reaches
// the observer (SteppedDown) and OnStoppedLeading. Its fields change under
// the box's lock.
type stepDowns struct {
	log   *slog.Logger // the Group's; nil: each machine logs its own (an Elector)
	until time.Time    // the end of the window gathering; zero: none
	n     int          // gathered, not logged yet
	named []string     // the first stepDownsNamed of them
	flush timer        // ends the window; nil until the first
	armed bool
}

// steppedDownLocked logs, or gathers, m's step-down from term at now, at
// the end of its trust window; the box's lock is held.
func (b *box) steppedDownLocked(m *machine, term int64, now time.Time) {
	s := &b.downs
	log := m.log
	if s.log == nil {
		log.Warn(msgTrust, "term", term)
		return
	}
	if !now.Before(s.until) {
		s.until = now.Add(stepDownsWindow)
		b.note(func() { log.Warn(msgTrust, "term", term) })
		return
	}
	s.n++
	if len(s.named) < stepDownsNamed {
		s.named = append(s.named, m.e.namespace)
	}
	if s.armed {
		return
	}
	s.armed = true
	wait := s.until.Sub(now)
	if s.flush == nil {
		s.flush = m.clk.AfterFunc(wait, func() {
			b.lock()
			defer b.unlock()
			b.flushDownsLocked()
		})
	} else {
		s.flush.Reset(wait)
	}
}

// flushDownsLocked logs the step-downs gathered and not logged yet, once
// the box's lock is released; the lock is held: when the window ends, and
// when the Group shuts down.
func (b *box) flushDownsLocked() {
	s := &b.downs
	s.armed = false
	if s.flush != nil {
		s.flush.Stop()
	}
	if s.n == 0 {
		return
	}
	n, named, log := s.n, s.named, s.log
	s.n, s.named = 0, nil
	b.note(func() {
		log.Warn("election: no renewal within the trust window in more namespaces; stepping down before their leases can expire",
			"namespaces", n, "within", stepDownsWindow, "first", named)
	})
}
