package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// ErrElectorStarted is returned by Elector.Run when Run was already called
// on that Elector. An Elector runs once; make a new one to run again.
var ErrElectorStarted = errors.New("election: Elector.Run already called")

// ElectorConfig configures an Elector. Zero fields take their documented
// defaults; NewElector returns ErrInvalidOption, naming the rule, for
// settings that do not fit the Election's expiry window.
type ElectorConfig struct {
	// Interval is the time between the rounds of a follower. Default
	// Expire()/3. Each wait is shortened by up to 20% at random, so
	// candidates do not tick in lockstep and none waits longer than
	// Interval. A follower whose last round saw the leader's lease end
	// before its next tick tries at that end instead (see Run), so after
	// a crash another candidate takes over about when the lease expires,
	// at most Expire() after the last renewal plus a round trip. A leader
	// renews by its lease: every Expire()/3, or every Interval when that
	// is longer, so several renewals can fail before its trust window
	// ends. Must be positive and at most Expire()/2.
	Interval time.Duration

	// SafetyMargin shortens the leader's trust in its lease: it leads only
	// until attemptStart + Expire() - SafetyMargin on the local monotonic
	// clock, where attemptStart is read before the Elect call that granted
	// or renewed the lease. The database lease lasts until the database's
	// now + Expire(), read after attemptStart, so the Elector stops leading
	// at least SafetyMargin before anyone else can be elected. The margin
	// must cover whatever can delay stepping down: the difference in rate
	// between the local and the database clock, the process being paused
	// (GC, CPU starvation, a suspended VM), and the leader's work noticing
	// its cancelled context. Default Expire()/5.
	// Must be positive and less than Expire() - Interval, so that a
	// renewal can land inside the trust window.
	SafetyMargin time.Duration

	// OnStartedLeading is called when the Elector starts leading, with the
	// lease it was granted (its Term is the fencing token to pass to
	// Guard). It runs in a goroutine of its own and should do the leader's
	// work until ctx is cancelled, which happens the moment leadership is
	// lost: the trust window ended without a renewal, the database named
	// another leader, Resign, or Run's context ended. It should return soon
	// after ctx is cancelled: the seat is never vacated while it runs.
	// Run and Resign vacate the seat only once it has returned; if it has
	// not returned within ShutdownTimeout, Run returns without vacating
	// and the lease expires by itself. A later OnStartedLeading of the same
	// Elector waits until it has returned, so two never run at once; it is
	// not called at all for a leadership that ended before its turn came.
	// ctx carries the values of Run's context. Optional.
	OnStartedLeading func(ctx context.Context, lease Lease)

	// OnStoppedLeading is called when leadership ends, after the context
	// given to OnStartedLeading was cancelled, with the last lease held
	// (its ExpiresAt is that of the last renewal). OnStartedLeading may
	// still be running when it is called. Optional.
	OnStoppedLeading func(lease Lease)

	// OnNewLeader is called when the Elector observes a leader or term
	// different from the last it observed, the first observation included:
	// another candidate, itself (before its OnStartedLeading), or a vacant
	// seat (a Lease whose Leader is uuid.Nil). Observations happen in
	// election rounds only, so short-lived leaders between two rounds are
	// not seen. Optional.
	OnNewLeader func(lease Lease)

	// ShutdownTimeout bounds each of the two waits of Run's return: for the
	// callbacks to finish (OnStartedLeading to return, pending callbacks to
	// run), and for the final unregistration, which runs under
	// context.WithoutCancel of Run's context with this timeout. When
	// OnStartedLeading is still running after the first wait, Run neither
	// unregisters nor vacates: it logs one warning and returns, and the
	// lease and the candidate row expire by themselves, so the next leader
	// waits for the whole lease. Default DefaultShutdownTimeout. Must not
	// be negative.
	ShutdownTimeout time.Duration
}

func (cfg ElectorConfig) callbacks() callbacks {
	return callbacks{started: cfg.OnStartedLeading, stopped: cfg.OnStoppedLeading, newLeader: cfg.OnNewLeader}
}

// An Elector runs the election loop for one candidate in one namespace: it
// registers, then runs Elect every Interval (which also refreshes the
// candidate row), leads while Elect grants or renews its lease, steps down
// when it cannot renew in time, and on shutdown hands the seat over at
// once. Its leadership follows the rules of the package doc's "The
// engine", which a Group follows in each of its namespaces.
//
// Callbacks run in order, one at a time, on a goroutine of the Elector (only
// the leader's work, OnStartedLeading, runs on a goroutine of its own). A
// slow callback delays the callbacks after it, never the election: rounds,
// renewals and stepping down go on. Callbacks must not block forever, and
// must not wait for Run to return.
//
// Its methods are safe for concurrent use.
type Elector struct {
	e      *Election
	id     uuid.UUID
	cfg    ElectorConfig
	t      timing
	m      *machine
	box    box
	events *dispatcher
	clk    clock
	log    *slog.Logger

	started atomic.Bool
	kick    chan struct{} // cap 1: signals are pending

	sigMu   sync.Mutex
	pending [sigSitOut + 1]bool
	wakeSig signal // the wake-up pending

	hooks testHooks
}

// testHooks let tests observe an Elector's rounds and inject faults into
// the calls of an Elector or a Group.
type testHooks struct {
	// call runs before each database call of a round (or attempt) with
	// the call's context; an error fails the call without running it.
	call func(ctx context.Context) error
	// round runs after each round (of a Group: without a lease).
	round func(roundReport)
	// prune runs before each piece of a Group's prune (pruneLed) with
	// its context; an error fails the piece without running it.
	prune func(ctx context.Context) error
	// walked runs in each round of a Group after its walk over the
	// members, under the Group's lock, before the statement is sent.
	walked func()
}

type roundReport struct {
	cause   roundCause
	lease   Lease
	err     error
	leading bool
}

// NewElector returns an Elector for candidate id in e's namespace. It
// returns ErrInvalidCandidate for uuid.Nil, and ErrInvalidOption naming each
// rule cfg breaks. Several Electors may share an Election (they then wake
// each other on handoff); each needs its own id.
func (e *Election) NewElector(id uuid.UUID, cfg ElectorConfig) (*Elector, error) {
	if id == uuid.Nil {
		return nil, fmt.Errorf("%w: NewElector", ErrInvalidCandidate)
	}
	t, err := checkTiming(e.expire, cfg.Interval, cfg.SafetyMargin, cfg.ShutdownTimeout)
	if err != nil {
		return nil, err
	}
	cfg.Interval, cfg.SafetyMargin, cfg.ShutdownTimeout = t.interval, t.margin, t.shutdownTimeout
	el := &Elector{
		e:      e,
		id:     id,
		cfg:    cfg,
		t:      t,
		events: newDispatcher(),
		clk:    systemClock{},
		log:    e.log.With("candidate", id),
		kick:   make(chan struct{}, 1),
	}
	el.m = newMachine(e, id, t, &el.box, el.clk, cfg.callbacks(), el.events, el.signal, el.log)
	return el, nil
}

// ID returns the candidate id.
func (el *Elector) ID() uuid.UUID { return el.id }

// Config returns the configuration in force, defaults filled in.
func (el *Elector) Config() ElectorConfig { return el.cfg }

// IsLeader reports whether the Elector leads now. It answers from memory,
// without a database call: true only between a successful grant or renewal
// and the end of its trust window (see ElectorConfig.SafetyMargin), and
// never after leadership was given up. Work outside the database should
// check it just before acting; writes in the database should use Guard.
func (el *Elector) IsLeader() bool {
	_, ok := el.Lease()
	return ok
}

// Lease returns the lease the Elector leads under, and whether it leads
// (IsLeader). Pass it to Guard.
func (el *Elector) Lease() (Lease, bool) {
	el.box.lock()
	defer el.box.unlock()
	return el.m.leaseLocked(el.clk.Now())
}

// Observed returns the seat as the Elector's last round saw it, whoever
// holds it: the zero Lease before the first round, a Lease with Leader
// uuid.Nil when the seat was vacant. Only IsLeader says whether the
// Elector may act as leader.
func (el *Elector) Observed() Lease {
	el.box.lock()
	defer el.box.unlock()
	return el.m.last
}

// Run registers the candidate and runs election rounds until ctx ends.
//
// Each round is one Elect, which refreshes the candidate row and grants or
// renews the lease. A follower's rounds run every Interval (jittered), a
// leader's every Expire()/3 (or Interval, when longer), and at once when
// another candidate of the namespace vacates the seat: in this process, or
// in another through the database's notifications (see "Fast handoff" in
// the package doc). A follower also runs a round at the end of the lease
// it last read, when that comes before its next tick. A round that fails
// (database down, connection cut, timeout) is logged with the Election's
// logger and retried with a capped, jittered backoff; it never ends Run.
// Each call is bounded by the trust window, and a timer ends leadership
// when the window passes, so a leader steps down in time even when a call
// hangs.
//
// When ctx ends, Run stops leading (cancelling the leader's context), waits
// for the callbacks to finish, unregisters the candidate, which vacates
// the seat if it held it and wakes the other candidates, and returns nil.
// The waits are bounded by ShutdownTimeout each. If OnStartedLeading has
// not returned by then, Run does not unregister: the seat is never vacated
// while the leader's work runs. It logs a warning and returns, and the
// lease expires by itself, at most the expiry window after the last
// renewal; the next leader waits for that. If the database is unreachable,
// the lease also expires by itself.
//
// Run returns an error only for a nil ctx (ErrInvalidOption), a second call
// (ErrElectorStarted), or ErrNotMigrated when the tables are missing before
// any round succeeded.
func (el *Elector) Run(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Run: nil context", ErrInvalidOption)
	}
	if !el.started.CompareAndSwap(false, true) {
		return ErrElectorStarted
	}
	el.box.lock()
	el.m.parent = context.WithoutCancel(ctx)
	el.box.unlock()
	// The hub (and on PostgreSQL the pool's LISTEN connection, when it is
	// the last) is left after the final unregistration: stopping a
	// listener first would delay the vacate that hands the seat over.
	h := el.e.joinHub(el.m)
	defer el.e.leaveHub(el.m, h)
	go el.events.run()
	el.log.Debug("election: elector running", "interval", el.cfg.Interval, "safety_margin", el.cfg.SafetyMargin)

	err := runRounds(ctx, el, el.t, el.clk, el.kick, el.log)

	el.box.lock()
	el.m.closeLocked(whyShutdown)
	el.box.unlock()
	el.events.close()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), el.cfg.ShutdownTimeout)
	defer cancel()
	finished := el.events.wait(wctx.Done())
	if err != nil {
		return err
	}
	select {
	case <-el.m.work.wait():
	case <-wctx.Done():
		el.box.lock()
		led := el.m.led
		el.box.unlock()
		el.log.Warn("election: OnStartedLeading still running after the shutdown timeout; not vacating the seat: "+
			"the lease expires by itself and the next leader waits for it",
			"shutdown_timeout", el.cfg.ShutdownTimeout, "term", led.Term, "lease_expires_at", led.ExpiresAt)
		return nil
	}
	if !finished {
		el.log.Warn("election: callbacks still running after the shutdown timeout; unregistering anyway",
			"shutdown_timeout", el.cfg.ShutdownTimeout)
	}
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), el.cfg.ShutdownTimeout)
	defer ucancel()
	if uerr := el.m.vacateAfterWork(uctx, "Run", anyTerm, true); uerr != nil {
		el.log.Warn("election: unregistering failed; the lease and the candidate row will expire", "err", uerr)
	} else {
		el.log.Debug("election: unregistered")
	}
	el.m.async.Wait()
	return nil
}

// Resign gives up leadership and stays a candidate: the Elector stops
// leading (cancelling the leader's context), waits for OnStartedLeading to
// return, then vacates the seat if it holds it (only the term it leads in,
// when it leads), which wakes the other candidates. Until the seat is
// vacated the Elector does not try to win (its rounds only heartbeat and
// look at the seat), and then it sits out one Interval, unless another
// candidate's handoff wakes it sooner (that candidate has held the seat
// since). Resigning while not leading waits for any leader work still
// running, vacates whatever lease the candidate holds, and sits out.
//
// Called from OnStartedLeading with its context (or one derived from it),
// Resign cannot wait for its caller: it stops leading and returns nil at
// once, and the seat is vacated as soon as OnStartedLeading returns.
// Otherwise ctx bounds the wait for the leader's work and the database
// call. When ctx ends before OnStartedLeading returned, Resign returns
// ctx's error and leaves the seat as it is: the Elector has stopped
// leading, and its lease runs until it expires, or until a later round of
// the Elector, still a candidate, renews it. Resign works whether or not
// Run runs.
func (el *Elector) Resign(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Resign: nil context", ErrInvalidOption)
	}
	el.box.lock()
	term := el.m.beginGiveUpLocked(whyResigned)
	el.box.unlock()
	return el.m.giveUp(ctx, "Resign", term, el.t.interval)
}

// signal is the machine's signal to the loop; signals coalesce.
func (el *Elector) signal(s signal) {
	el.sigMu.Lock()
	if s.kind == sigWake || s.kind == sigWakeAny {
		// A wake-up that names no namespace is one whose vacater is not
		// known; a known one wins over it.
		if !el.pending[sigWake] || s.vacated != uuid.Nil {
			el.wakeSig = signal{kind: sigWake, src: s.src, vacated: s.vacated}
		}
		el.pending[sigWake] = true
	} else {
		el.pending[s.kind] = true
	}
	el.sigMu.Unlock()
	select {
	case el.kick <- struct{}{}:
	default:
	}
}

// signaled takes the pending signals and returns the cause of the round
// they call for now, or 0 when none does; and whether a sit-out began, so
// that the next tick counts from now (driverLoop).
func (el *Elector) signaled() (roundCause, bool) {
	el.sigMu.Lock()
	p, w := el.pending, el.wakeSig
	el.pending, el.wakeSig = [sigSitOut + 1]bool{}, signal{}
	el.sigMu.Unlock()
	m := el.m
	now := el.clk.Now()
	el.box.lock()
	defer el.box.unlock()
	switch {
	case p[sigOusted] && m.cur != nil:
		return causeOusted, false
	case p[sigRenew] && m.cur != nil:
		return causeRenew, false
	case p[sigWake] && m.wokenLocked(w, now):
		// The seat is changing hands: take the locked path, which waits
		// for the vacating transaction (a local wake-up comes before it
		// commits) rather than read the old holder.
		el.e.forgetSeat()
		m.wokeLocked(w.src)
		return wakeCause(w.src), false
	case p[sigEdge] && m.mayTryLocked(now):
		return causeEdge, false
	}
	return 0, p[sigSitOut]
}

// leadsAll reports whether the Elector leads (driverLoop).
func (el *Elector) leadsAll() bool {
	el.box.lock()
	defer el.box.unlock()
	return el.m.cur != nil
}

// round runs one Elect, or, while the machine may not try (sitting out,
// giving up) and in a sit-out's tick, a heartbeat and a look at the seat,
// and hands the result to the machine.
func (el *Elector) round(ctx context.Context, cause roundCause) error {
	m := el.m
	start := el.clk.Now()
	el.box.lock()
	held := m.cur
	try := held != nil || cause != causeSitOut && m.mayTryLocked(start)
	var (
		gaveUp   int64
		probeEnd time.Time
	)
	if try {
		m.inflight.add()
		if held == nil {
			gaveUp, probeEnd = m.probeLocked()
		}
	}
	el.box.unlock()
	r := result{start: start, cause: cause, held: held, observe: !try}
	if !try {
		r.cause = causeSitOut
	}
	// Never past the trust window when leading, and never longer than a
	// trust window otherwise (a grant that took longer is not trusted).
	timeout := el.t.trust()
	if held != nil {
		el.box.lock()
		if left := held.trustedUntil.Sub(start); left > 0 && left < timeout {
			timeout = left
		}
		el.box.unlock()
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stale := false
	if r.err = el.beforeCall(actx); r.err == nil && gaveUp != 0 {
		r.lease, stale, r.err = el.e.wakeStale(actx, gaveUp)
		r.observe = stale
	}
	if r.err == nil && !stale {
		if r.observe {
			r.lease, r.err = el.lookAtSeat(actx)
		} else {
			var yielded bool
			r.lease, yielded, r.err = el.e.campaign(actx, el.id, true, nil)
			if yielded {
				r.why = whyVacated
			}
		}
	}
	el.box.lock()
	_, err := m.settleLocked(r)
	if stale {
		m.staleWakeLocked(probeEnd)
	}
	el.box.unlock()
	if el.hooks.round != nil {
		el.hooks.round(roundReport{cause: r.cause, lease: r.lease, err: err, leading: el.IsLeader()})
	}
	if try {
		m.inflight.done()
	}
	return err
}

// lookAtSeat keeps the candidate row alive and reads the seat, without
// trying to win it.
func (el *Elector) lookAtSeat(ctx context.Context) (Lease, error) {
	if err := el.e.Heartbeat(ctx, el.id); err != nil {
		return Lease{}, err
	}
	return el.e.Leader(ctx)
}

func (el *Elector) beforeCall(ctx context.Context) error { return el.hooks.before(ctx) }

func (h testHooks) before(ctx context.Context) error {
	if h.call != nil {
		return h.call(ctx)
	}
	return nil
}

// machines returns the Elector's one machine (Runner).
func (el *Elector) machines() []*machine { return []*machine{el.m} }
