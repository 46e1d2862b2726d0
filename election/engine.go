package election

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/handoff"
)

// The engine: one candidate's leadership of one namespace, as one state
// machine (a machine). An Elector drives one; a Group drives one per
// namespace. The drivers decide when to call the database and which call
// to make (an Elector's Elect, a Group's batch round or attempt) and hand
// each result to the machine, which alone decides what it means: whether
// leadership starts, is renewed or ends and why, how long the lease is
// trusted, when to try at the end of another candidate's lease, when to
// sit out, when the leader's work runs, and when a term may be vacated.
// See "The engine" in the package doc for its states.

// stopWhy is why a leadership ended: the reason observers are given, the
// words of the log line, and whether the candidate sits out.
type stopWhy struct {
	reason StopReason
	detail string
	// sitOut: another process vacated the term (an operator moving
	// leadership on); the candidate leaves the seat to the others for one
	// interval, which no handoff wake-up shortens.
	sitOut bool
}

// Why leaderships end, each decided where it happens.
var (
	whyResigned = stopWhy{reason: StopResigned, detail: "resigned"}
	whyLeft     = stopWhy{reason: StopLeft, detail: "left the namespace"}
	whyBalanced = stopWhy{reason: StopBalanced, detail: "balancing"}
	whyShutdown = stopWhy{reason: StopShutdown, detail: "shutting down"}
	whyOther    = stopWhy{reason: StopLost, detail: "the database names another leader"}
	whyNewTerm  = stopWhy{reason: StopLost, detail: "a new term began"}
	whyExpired  = stopWhy{reason: StopLost, detail: "the lease expired before its renewal"}
	whyVacated  = stopWhy{reason: StopVacated, detail: "the seat was vacated by another process", sitOut: true}
	whyTrust    = stopWhy{reason: StopSteppedDown, detail: "trust window passed"}
	whyLate     = stopWhy{reason: StopSteppedDown, detail: "the renewal returned after the trust window"}
	// whyOverloaded: a Group's rounds answer too slowly to renew every
	// seat it holds in time; it keeps fewer (carryLocked).
	whyOverloaded = stopWhy{reason: StopOverloaded, detail: "the database answers rounds too slowly to renew every seat in time"}
)

// whyLost says why mine, a lease a call tried to renew and did not, is
// lost, from the seat as read after the renewal failed.
func whyLost(s seat, id uuid.UUID, mine Lease) stopWhy {
	switch {
	case s.leader == id && s.term == mine.Term && s.live():
		// A reading from before the renewal waited for the row still
		// shows the lease, but the renewal found the row changed.
		return whyVacated
	case s.leader == id && s.term == mine.Term:
		return whyExpired
	case s.leader == uuid.Nil && s.term == mine.Term, s.now.Before(mine.ExpiresAt):
		// Vacated in its term, or moved on while the lease was live,
		// which only a vacate allows: by someone else, since a candidate
		// vacates only terms it no longer leads.
		return whyVacated
	}
	return whyOther
}

// signal is what a machine asks of its driver, which acts on it between
// its calls. Signals must not block nor take the box's lock.
type signal struct {
	kind    signalKind
	src     handoff.Source // sigWake
	vacated uuid.UUID      // sigWake: the candidate whose vacate it announces; uuid.Nil when not known
}

type signalKind int

const (
	sigEdge    signalKind = iota + 1 // the lease another candidate held has ended: try now
	sigWake                          // a handoff: a seat was vacated by another candidate
	sigWakeAny                       // a wake-up that names no namespace
	sigOusted                        // another process vacated the term being led
	sigRenew                         // renew now: the trust left is shorter than one renewal period
	sigSitOut                        // a sit-out began after a give-up: the next poll counts from now
)

// result is what one database call told a machine.
type result struct {
	start time.Time  // on the machine's clock, before the call
	cause roundCause // why the call ran
	lease Lease      // the seat after the call
	err   error
	// observe marks a reading that could not grant or renew (a heartbeat
	// and a look at the seat): it is observed, never acted on.
	observe bool
	// held is the leadership whose lease the call tried to renew; nil
	// when it tried none.
	held *leadership
	// why is why held was lost when the call did not renew it (zero: the
	// database names another leader).
	why stopWhy
}

// leadership is one stretch of leading, from start to stop.
type leadership struct {
	lease Lease // ExpiresAt follows renewals
	// trustedUntil ends the trust window on the machine's clock: the
	// start of the call that granted or last renewed the lease, plus
	// Expire() - SafetyMargin. Each renewal moves it.
	trustedUntil time.Time
	since        time.Time // when leading began (Observer's Tenure)
	cancel       context.CancelFunc
	watchdog     timer // ends the leadership at trustedUntil
}

// callbacks are a driver's callbacks (ElectorConfig's, GroupConfig's).
type callbacks struct {
	started   func(ctx context.Context, lease Lease)
	stopped   func(lease Lease)
	newLeader func(lease Lease)
}

// machine is one candidate's leadership of one namespace. Its fields after
// the atomics change only under box.mu.
type machine struct {
	e      *Election
	id     uuid.UUID
	t      timing
	box    *box // the driver's lock, shared by its machines
	clk    clock
	cb     callbacks
	events *dispatcher
	signal func(signal) // the driver's
	log    *slog.Logger

	leading  atomic.Bool  // cur != nil, read without the lock by the hubs
	working  atomic.Int32 // OnStartedLeading calls running (HealthCheck)
	work     *counter     // OnStartedLeading calls queued or running
	inflight *counter     // calls in flight that may grant or renew the seat
	async    sync.WaitGroup
	giveUps  chan struct{} // nil, or a Group's: its give-ups vacate one at a time, its rounds keep their connections

	parent    context.Context // of the leader's work: the driver's Run context, without its cancellation
	cur       *leadership     // nil while not leading
	led       Lease           // the lease of the last leadership, as it ended
	renewed   time.Time       // when the last grant or renewal returned (HealthCheck)
	last      Lease           // the seat as last seen
	seen      bool            // last is set
	holdUntil time.Time       // sitting out: no tries before
	lenient   bool            // the sit-out follows the machine's own give-up: another candidate's handoff ends it
	gaveUp    int64           // the term of the give-up that began a lenient sit-out (the highest it held)
	probe     int64           // a wake-up ended a lenient sit-out: the next try checks first that the seat moved past this term (probeLocked)
	probeEnd  time.Time       // the end of the sit-out that wake-up ended
	giving    int             // give-ups (Resign, balancing) not done: no tries, grants are strays
	closed    bool            // left, or its driver stopped: never leads again
	stray     bool            // a term was granted that it could not lead: vacate whatever term it holds
	reclaim   int64           // the term it stepped down from, which the database may still hold for it (reclaimLocked); 0 when none
	prevWork  chan struct{}   // closed when the last OnStartedLeading returned (nil: none)
	edge      timer           // the try at the end of another candidate's lease
	edgeFor   Lease           // the lease edge tries are for
	edgeTries int

	// settled, set by tests before Run, sees every result the machine
	// settles, under the box's lock.
	settled func(r result, started bool, err error)
}

func newMachine(e *Election, id uuid.UUID, t timing, b *box, clk clock, cb callbacks, events *dispatcher, sig func(signal), log *slog.Logger) *machine {
	return &machine{e: e, id: id, t: t, box: b, clk: clk, cb: cb, events: events, signal: sig, log: log,
		work: newCounter(), inflight: newCounter(), parent: context.Background()}
}

// leaseLocked returns the lease the machine leads under at now, and
// whether it leads: it holds a lease and is within its trust window.
func (m *machine) leaseLocked(now time.Time) (Lease, bool) {
	if c := m.cur; c != nil && now.Before(c.trustedUntil) {
		return c.lease, true
	}
	return Lease{}, false
}

// mayTryLocked reports whether the machine may try to take the seat now:
// it is open, not leading, not giving up, not sitting out.
func (m *machine) mayTryLocked(now time.Time) bool {
	return !m.closed && m.giving == 0 && m.cur == nil && !now.Before(m.holdUntil)
}

// settleLocked acts on the result of a call: it observes the seat, and
// starts, renews or ends leadership. It reports the call to the observer,
// and returns whether a leadership began, and the error of a call that
// failed or whose grant came too late to trust.
func (m *machine) settleLocked(r result) (started bool, err error) {
	now := m.clk.Now()
	superseded := false // answered too late to act on
	defer func() {
		m.reportLocked(r, now, started, superseded, err)
		if m.settled != nil {
			m.settled(r, started, err)
		}
	}()
	switch {
	case r.err != nil:
		return false, r.err
	case r.held != nil && m.cur != r.held:
		superseded = true // the leadership it renewed ended while it ran
		return false, nil
	case r.held == nil && m.cur != nil && !r.observe:
		superseded = true // it began before the leadership, and its reading predates it
		return false, nil
	}
	m.observeLocked(r.lease)
	if r.observe || !r.lease.HeldBy(m.id) {
		if !r.observe {
			why := r.why
			if why.reason == "" {
				why = whyOther
			}
			if m.cur != nil {
				m.stopLocked(why, now)
			}
			if why.sitOut {
				m.sitOutLocked(now, m.t.interval, false)
			}
		}
		m.edgeLocked(r.lease, now)
		return false, nil
	}
	trusted := r.start.Add(m.t.trust())
	if !now.Before(trusted) {
		if m.cur != nil {
			m.stopLocked(whyLate, now)
		}
		return false, fmt.Errorf("election: the grant or renewal took longer than the trust window (%v)", m.t.trust())
	}
	m.renewed = now
	if c := m.cur; c != nil {
		if c.lease.Term == r.lease.Term {
			c.lease.ExpiresAt = r.lease.ExpiresAt
			c.trustedUntil = trusted
			c.watchdog.Reset(trusted.Sub(now))
			m.e.remember(m.id, c.lease)
			m.soonLocked(trusted, now)
			return false, nil
		}
		m.stopLocked(whyNewTerm, now)
	}
	if m.closed || m.giving > 0 {
		m.stray, superseded = true, true
		return false, nil
	}
	m.startLocked(r.lease, trusted, now, r.cause)
	m.soonLocked(trusted, now)
	return true, nil
}

// soonLocked asks for a renewal now when a grant or renewal leaves less
// trust than one renewal period (it came late, the round having waited):
// the next tick would come after the trust window, and the leader would
// step down, then take the same term back.
func (m *machine) soonLocked(trusted, now time.Time) {
	if trusted.Sub(now) < m.t.renewEvery() {
		m.signal(signal{kind: sigRenew})
	}
}

// startLocked begins leading under l, trusted until trusted.
func (m *machine) startLocked(l Lease, trusted, now time.Time, cause roundCause) {
	ctx, cancel := context.WithCancel(context.WithValue(m.parent, workKey{}, m))
	c := &leadership{lease: l, trustedUntil: trusted, since: now, cancel: cancel}
	c.watchdog = m.clk.AfterFunc(trusted.Sub(now), func() { m.trustEnded(c) })
	m.cur, m.stray, m.reclaim, m.probe = c, false, 0, 0
	m.leading.Store(true)
	m.box.leading++
	m.stopEdgeLocked()
	m.e.remember(m.id, l)
	m.log.Info("election: leading", "term", l.Term, "lease_expires_at", l.ExpiresAt, "round", cause.String())
	announced := make(chan struct{})
	o := m.e.observer
	ld := Leadership{Namespace: m.e.namespace, Candidate: m.id, Lease: l}
	m.box.note(func() {
		if o != nil {
			o.LeadershipStarted(ld)
		}
		close(announced)
	})
	cb := m.cb.started
	if cb == nil {
		return
	}
	// The work starts after the callbacks queued before it, once the
	// observer heard of the leadership and the previous work of this
	// namespace returned; never for a leadership that has already ended.
	m.work.add()
	prev, done := m.prevWork, make(chan struct{})
	m.prevWork = done
	m.events.push(func() {
		go func() {
			defer close(done)
			defer m.work.done()
			<-announced
			if prev != nil {
				<-prev
			}
			if ctx.Err() != nil {
				return
			}
			m.working.Add(1)
			defer m.working.Add(-1)
			cb(ctx, l)
		}()
	})
}

// workKey marks the context of a leader's work with its machine.
type workKey struct{}

// fromWork reports whether ctx is the context of m's leader work, or one
// derived from it.
func (m *machine) fromWork(ctx context.Context) bool { return ctx.Value(workKey{}) == m }

// stopLocked ends the current leadership for why.
func (m *machine) stopLocked(why stopWhy, now time.Time) {
	c := m.cur
	m.cur = nil
	m.leading.Store(false)
	m.box.leading--
	m.box.stops++
	m.led = c.lease
	m.reclaim = 0
	if why.reason == StopSteppedDown {
		// No renewal confirmed in time, but one may have landed, or the
		// lease may not have ended yet.
		m.reclaim = c.lease.Term
	}
	c.cancel()
	c.watchdog.Stop()
	m.e.forget(m.id)
	m.log.Info("election: stopped leading", "term", c.lease.Term, "reason", why.detail)
	if o := m.e.observer; o != nil {
		ld := Leadership{Namespace: m.e.namespace, Candidate: m.id, Lease: c.lease, Reason: why.reason, Tenure: now.Sub(c.since)}
		m.box.note(func() {
			if why.reason == StopSteppedDown {
				o.SteppedDown(ld)
			}
			o.LeadershipStopped(ld)
		})
	}
	if cb := m.cb.stopped; cb != nil {
		l := c.lease
		m.events.push(func() { cb(l) })
	}
}

// trustEnded is the watchdog of leadership c: it ends c when its trust
// window passed without a renewal, whatever the driver is doing.
func (m *machine) trustEnded(c *leadership) {
	m.box.lock()
	defer m.box.unlock()
	if m.cur != c {
		return
	}
	if now := m.clk.Now(); !now.Before(c.trustedUntil) {
		m.box.steppedDownLocked(m, c.lease.Term, now)
		m.stopLocked(whyTrust, now)
	} else {
		c.watchdog.Reset(c.trustedUntil.Sub(now))
	}
}

// reclaimLocked returns the term the machine stepped down from (its trust
// window passed while a renewal waited, or a renewal returned too late),
// which the database may still hold for the candidate, when the machine
// may try: a Group's round renews it with the leases it holds (the renewal
// changes only a live lease of the candidate in that term), and the
// machine leads again in that term. A renewal held up by a stall often
// lands when the stall ends, whether or not its round timed out, and
// extends a lease no process trusts: without the reclaim the seat stays
// led by nobody for a lease, and a Group that sheds its attempts while its
// rounds are slow would not take it back even then. A renewal of the
// candidate's own live lease is no attempt: it is never shed, and keeps
// the term. The first reading that shows the seat otherwise ends it
// (observeLocked).
func (m *machine) reclaimLocked(now time.Time) (int64, bool) {
	if m.reclaim == 0 || !m.mayTryLocked(now) {
		return 0, false
	}
	return m.reclaim, true
}

// observeLocked records the seat as a call saw it, and reports a change
// of leader or term to OnNewLeader.
func (m *machine) observeLocked(l Lease) {
	changed := !m.seen || l.Leader != m.last.Leader || l.Term != m.last.Term
	m.last, m.seen = l, true
	if !l.HeldBy(m.id) || l.Term != m.reclaim {
		m.reclaim = 0
	}
	if cb := m.cb.newLeader; changed && cb != nil {
		m.events.push(func() { cb(l) })
	}
}

// edgeLocked is crash failover at the lease's edge. After a call that saw
// another candidate's live lease, the machine knows when it ends: the
// remaining time by the database clock, counted on the local clock
// (Election.seatEnds). When that comes before the next poll, it asks its
// driver to try then (plus edgeMargin): a crashed leader is replaced one
// lease after its last renewal, not at the next poll after that. The
// first try counts from the reading's sending, the second from its answer
// (edgeTries says why), and there are no more, so that a seat still held
// at its edge (renewed, or not yet expired by the database clock, which
// decides) cannot make it spin.
func (m *machine) edgeLocked(l Lease, now time.Time) {
	if m.cur != nil || m.closed || l.Vacant() || l.Leader == m.id {
		return
	}
	if !sameLease(l, m.edgeFor) {
		m.edgeFor, m.edgeTries = l, 0
	}
	if m.edgeTries >= edgeTries {
		return
	}
	until, by, ok := m.e.seatEnds(l.Leader)
	if !ok {
		return
	}
	if m.edgeTries > 0 {
		until = by
	}
	d := time.Until(until) + edgeMargin
	if d >= m.t.interval {
		return
	}
	m.edgeTries++
	m.stopEdgeLocked()
	m.edge = m.clk.AfterFunc(max(d, 0), func() { m.signal(signal{kind: sigEdge}) })
}

func (m *machine) stopEdgeLocked() {
	if m.edge != nil {
		m.edge.Stop()
		m.edge = nil
	}
}

// sameLease reports whether a and b are one reading of a lease: same
// holder, term and expiry.
func sameLease(a, b Lease) bool {
	return a.Leader == b.Leader && a.Term == b.Term && a.ExpiresAt.Equal(b.ExpiresAt)
}

// shedLocked reports a try its driver shed: the database is too slow for
// more than the rounds.
func (m *machine) shedLocked(start time.Time) {
	if o := m.e.observer; o != nil {
		a := Attempt{Namespace: m.e.namespace, Candidate: m.id, Outcome: OutcomeShed, Duration: m.clk.Now().Sub(start)}
		m.box.note(func() { o.Attempt(a) })
	}
}

// wokeLocked reports a handoff that makes the machine try.
func (m *machine) wokeLocked(src handoff.Source) {
	if o := m.e.observer; o != nil {
		w := Wake{Namespace: m.e.namespace, Candidate: m.id, Source: "local"}
		if src == handoff.Notify {
			w.Source = "notify"
		}
		m.box.note(func() { o.HandoffWake(w) })
	}
}

// beginGiveUpLocked starts a give-up (Resign, balancing): the machine
// stops leading for why and makes no try until the give-up is done.
func (m *machine) beginGiveUpLocked(why stopWhy) (term int64) {
	term = anyTerm
	if m.cur != nil {
		term = m.cur.lease.Term
		m.stopLocked(why, m.clk.Now())
	}
	m.reclaim = 0
	m.giving++
	return term
}

// giveUp ends a give-up begun with beginGiveUpLocked: once the leader's
// work has returned and no call that may grant the seat is in flight, it
// vacates term (whatever term the candidate holds when a stray grant came
// meanwhile, or term is anyTerm), then sits out for hold, leniently. Called
// from the leader's work itself (ctx is its context), it cannot wait for
// its caller: it returns nil at once and finishes on its own once the work
// has returned.
func (m *machine) giveUp(ctx context.Context, op string, term int64, hold time.Duration) error {
	finish := func(ctx context.Context) error {
		err := m.vacateAfterWork(ctx, op, term, false)
		m.box.lock()
		m.giving--
		if err == nil && hold > 0 {
			m.gaveUp = max(term, m.led.Term)
			if m.last.HeldBy(m.id) {
				m.gaveUp = max(m.gaveUp, m.last.Term) // a stray grant's, vacated with it
			}
			m.sitOutLocked(m.clk.Now(), hold, true)
			m.signal(signal{kind: sigSitOut})
		}
		m.box.unlock()
		return err
	}
	if !m.fromWork(ctx) {
		return finish(ctx)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.t.shutdownTimeout+m.t.expire)
	m.async.Add(1)
	go func() {
		defer m.async.Done()
		defer cancel()
		if err := finish(wctx); err != nil {
			m.log.Warn("election: "+op+": vacating the seat failed; the lease will expire", "err", err)
		}
	}()
	return nil
}

// closeLocked closes the machine for good (Leave, or its driver's Run
// returning): it stops leading for why and never leads again. It reports
// whether the candidate may hold a term in the namespace, which the
// closing call must then vacate.
func (m *machine) closeLocked(why stopWhy) (mayHold bool) {
	m.closed = true
	m.stopEdgeLocked()
	mayHold = m.stray || m.giving > 0 || m.cur != nil || m.reclaim != 0
	if m.cur != nil {
		m.stopLocked(why, m.clk.Now())
	}
	m.reclaim = 0
	return mayHold
}

// errWorkRunning is wrapped by vacateAfterWork's error when ctx ended
// before the leader's work returned: the seat was left as it was.
var errWorkRunning = fmt.Errorf("the leader's work has not returned")

// vacateAfterWork vacates term (anyTerm: whatever term the candidate
// holds) once the leader's work has returned and the calls in flight that
// may grant the seat are done, and with unregister deletes the candidate
// row too. When ctx ends first it changes nothing and returns an error
// wrapping errWorkRunning and ctx's error: the seat is never vacated
// while the leader's work runs.
func (m *machine) vacateAfterWork(ctx context.Context, op string, term int64, unregister bool) error {
	if err := m.afterWork(ctx, op); err != nil {
		return err
	}
	if m.giveUps != nil && !unregister {
		select {
		case m.giveUps <- struct{}{}:
			defer func() { <-m.giveUps }()
		case <-ctx.Done():
			return fmt.Errorf("election: %s: %w", op, ctx.Err())
		}
	}
	m.box.lock()
	if m.stray {
		term, m.stray = anyTerm, false
	}
	m.box.unlock()
	return m.e.vacate(ctx, op, m.id, term, unregister, nil)
}

// The machine is a member of its namespace's handoff hub (handoff.Member).

// Candidate is the machine's candidate id.
func (m *machine) Candidate() uuid.UUID { return m.id }

// Poke tells the machine another candidate vacated the seat.
func (m *machine) Poke(src handoff.Source, vacated uuid.UUID) {
	m.signal(signal{kind: sigWake, src: src, vacated: vacated})
}

// WakeAny tells the machine of a wake-up that names no namespace.
func (m *machine) WakeAny() { m.signal(signal{kind: sigWakeAny, src: handoff.Notify}) }

// PokeOusted tells the machine someone else vacated its term.
func (m *machine) PokeOusted() {
	if m.leading.Load() {
		m.signal(signal{kind: sigOusted})
	}
}
