package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// DefaultShutdownTimeout is ElectorConfig.ShutdownTimeout's default.
const DefaultShutdownTimeout = 5 * time.Second

// ErrElectorStarted is returned by Elector.Run when Run was already called
// on that Elector. An Elector runs once; make a new one to run again.
var ErrElectorStarted = errors.New("election: Elector.Run already called")

// ElectorConfig configures an Elector. Zero fields take their documented
// defaults; NewElector returns ErrInvalidOption, naming the rule, for
// settings that do not fit the Election's expiry window.
type ElectorConfig struct {
	// Interval is the time between election rounds. Default Expire()/3. Each
	// wait is shortened by up to 20% at random, so candidates do not tick in
	// lockstep and none waits longer than Interval. A follower whose last
	// round saw the leader's lease end before its next tick tries at that
	// end instead (see Run), so after a crash another candidate takes over
	// about when the lease expires, at most Expire() after the last renewal
	// plus a round trip. A leader renews its lease every Interval, so
	// several renewals can fail before its trust window ends. Must be
	// positive and at most Expire()/2.
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
	// after ctx is cancelled: the seat is never handed over while it runs.
	// Run and Resign vacate the seat only once it has returned; if it has
	// not returned within ShutdownTimeout, Run returns without vacating
	// and the lease expires by itself. A later OnStartedLeading of the same
	// Elector waits until it has returned, so two never run at once. ctx
	// carries the values of Run's context. Optional.
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
	// run), and for the final UnregisterCandidate, which runs under
	// context.WithoutCancel of Run's context with this timeout. When
	// OnStartedLeading is still running after the first wait, Run neither
	// unregisters nor vacates: it logs one warning and returns, and the
	// lease and the candidate row expire by themselves, so the next leader
	// waits for the whole lease. Default DefaultShutdownTimeout. Must not
	// be negative.
	ShutdownTimeout time.Duration
}

// An Elector runs the election loop for one candidate: it registers, then
// every Interval runs Elect (which also refreshes the candidate row),
// leads while Elect grants or renews its lease, steps down when it cannot
// renew in time, and on shutdown hands the seat over at once.
//
// When another process vacates the term it leads in (an operator's
// VacateSeat or VacateLease, or an UnregisterCandidate of its id), the
// Elector stops leading at its next round (at once when the vacate reaches
// it: in process, or through PostgreSQL NOTIFY or SQLite's handoff file),
// reporting StopVacated, and sits out one tick (heartbeat and observe
// only) so that another live candidate takes the seat; with no other
// candidate it takes the seat back in a new term. Until that round the
// vacated leader's Guard already fails: fence leader-only writes with it.
//
// Callbacks run in order, one at a time, on a goroutine of the Elector (only
// the leader's work, OnStartedLeading, runs on a goroutine of its own). A
// slow callback delays the callbacks after it, never the election: rounds,
// renewals and stepping down go on. Callbacks must not block forever, and
// must not wait for Run to return.
//
// Its methods are safe for concurrent use.
type Elector struct {
	e   *Election
	id  uuid.UUID
	cfg ElectorConfig
	log *slog.Logger

	started atomic.Bool
	wake    chan wakeSource // cap 1: a handoff may let us win now
	ousted  chan struct{}   // cap 1: another process vacated this candidate's term
	resign  chan resignRequest
	kick    chan struct{} // cap 1: the trust deadline moved (watchdog)
	events  *dispatcher
	work    *workCount // OnStartedLeading calls queued or running

	mu        sync.Mutex
	loopDone  chan struct{} // nil before Run; closed when its loop ends
	cur       *leadership   // nil when not leading
	last      Lease         // last lease seen
	led       Lease         // lease of the last leadership, as it ended
	resigning int           // Resigns waiting to vacate: rounds only observe
	yielded   bool          // the last round found its term vacated by someone else: sit out
	renewed   time.Time     // monotonic: when the last grant or renewal returned (HealthCheck)

	working atomic.Int32 // OnStartedLeading calls running (HealthCheck)

	// Loop-only state.
	seen       bool
	seenLeader uuid.UUID
	seenTerm   int64
	edgeLease  Lease // the lease whose end the last edge rounds were for
	edgeTries  int   // edge rounds for edgeLease

	// Test hooks, set by tests in this package before Run. now is the
	// monotonic clock of the trust window (TestTrustWindowEdges stubs it).
	now   func() time.Time
	hooks electorHooks
}

// electorHooks let tests observe rounds and inject faults.
type electorHooks struct {
	// call runs before each database call of a round with the call's
	// context; an error fails the call without running it.
	call func(ctx context.Context) error
	// round runs after each round.
	round func(roundReport)
}

// roundCause says why a round ran.
type roundCause int

const (
	causeStart       roundCause = iota + 1 // first round of Run
	causeTick                              // the interval passed
	causeRetry                             // the backoff after a failed round passed
	causeWakeLocal                         // a seat vacated in this process
	causeWakeNotify                        // a NOTIFY from the database
	causeAfterResign                       // the tick skipped after Resign or a vacated term (observe only)
	causeEdge                              // the lease another candidate held has just ended
	causeOusted                            // another process vacated the term this Elector leads in
)

func (c roundCause) String() string {
	switch c {
	case causeStart:
		return "start"
	case causeTick:
		return "tick"
	case causeRetry:
		return "retry"
	case causeWakeLocal:
		return "wake"
	case causeWakeNotify:
		return "notify"
	case causeAfterResign:
		return "after-resign"
	case causeEdge:
		return "edge"
	case causeOusted:
		return "ousted"
	}
	return "unknown"
}

type roundReport struct {
	cause   roundCause
	lease   Lease
	err     error
	leading bool
}

// leadership is one stretch of leading, from start to stop. Its fields
// change under Elector.mu.
type leadership struct {
	lease Lease // ExpiresAt follows renewals
	// trustedUntil ends the trust window on the monotonic clock: the start
	// of the attempt that granted or last renewed the lease, plus
	// Expire() - SafetyMargin. Each renewal moves it.
	trustedUntil time.Time
	cancel       context.CancelFunc // cancels the context of the leader's work
	since        time.Time          // monotonic: when leading began (Observer's Tenure)
}

// trusted reports whether the leadership may still be acted on at now.
func (l *leadership) trusted(now time.Time) bool { return now.Before(l.trustedUntil) }

type resignRequest struct {
	reply chan int64 // the term to vacate, or anyTerm
}

// NewElector returns an Elector for candidate id in e's namespace. It
// returns ErrInvalidCandidate for uuid.Nil, and ErrInvalidOption naming each
// rule cfg breaks. Several Electors may share an Election (they then wake
// each other on handoff); each needs its own id.
func (e *Election) NewElector(id uuid.UUID, cfg ElectorConfig) (*Elector, error) {
	if id == uuid.Nil {
		return nil, fmt.Errorf("%w: NewElector", ErrInvalidCandidate)
	}
	cfg, err := checkRoundConfig(e.expire, cfg)
	if err != nil {
		return nil, err
	}
	return &Elector{
		e:      e,
		id:     id,
		cfg:    cfg,
		log:    e.log.With("candidate", id),
		wake:   make(chan wakeSource, 1),
		ousted: make(chan struct{}, 1),
		resign: make(chan resignRequest),
		kick:   make(chan struct{}, 1),
		events: newDispatcher(),
		work:   newWorkCount(),
		now:    time.Now,
	}, nil
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
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.cur != nil && el.cur.trusted(el.now())
}

// Lease returns the last lease the Elector saw, whoever holds it: the zero
// Lease before the first round, a Lease with Leader uuid.Nil when the seat
// was vacant. Only IsLeader says whether the Elector may act as leader.
func (el *Elector) Lease() Lease {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.last
}

// Run registers the candidate and runs election rounds until ctx ends.
//
// Each round is one Elect, which refreshes the candidate row and grants or
// renews the lease. Rounds run every Interval (jittered), and at once when
// another candidate of the namespace vacates the seat: in this process, or
// in any process on PostgreSQL through pgx (LISTEN/NOTIFY on a connection
// taken from the pool while Electors run). A follower also runs a round at
// the end of the lease it last read, when that comes before its next tick:
// the lease's remaining time by the database clock, counted on the local
// monotonic clock from the reading, plus 1 ms. It does so once per lease;
// if the lease was renewed meanwhile, it goes back to its ticks. A round
// that fails (database down, connection cut, timeout) is logged with the
// Election's logger and retried with a capped, jittered backoff; it never
// ends Run. Each call is bounded by the trust window, and a timer ends
// leadership when the window passes, so a leader steps down in time even
// when a call hangs.
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
	loopDone := make(chan struct{})
	el.mu.Lock()
	el.loopDone = loopDone
	el.mu.Unlock()

	h := joinHub(el.e, el)
	// The hub (and on PostgreSQL the pool's LISTEN connection, when it is
	// the last) is left after the final unregistration: stopping a
	// listener first would delay the vacate that hands the seat over.
	defer leaveHub(el.e, el, h)
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		el.watch(stopWatch)
	}()
	go el.events.run()
	el.log.Debug("election: elector running", "interval", el.cfg.Interval, "safety_margin", el.cfg.SafetyMargin)

	err := el.loop(ctx)

	close(loopDone)
	el.mu.Lock()
	if el.cur != nil {
		el.stopLocked("shutting down")
	}
	el.mu.Unlock()
	close(stopWatch)
	<-watchDone

	el.events.close()
	t := time.NewTimer(el.cfg.ShutdownTimeout)
	finished := el.events.wait(t.C)
	t.Stop()
	if err != nil {
		return err
	}
	if !el.work.idle() {
		el.mu.Lock()
		led := el.led
		el.mu.Unlock()
		el.log.Warn("election: OnStartedLeading still running after the shutdown timeout; not vacating the seat: "+
			"the lease expires by itself and the next leader waits for it",
			"shutdown_timeout", el.cfg.ShutdownTimeout, "term", led.Term, "lease_expires_at", led.ExpiresAt)
		return nil
	}
	if !finished {
		el.log.Warn("election: callbacks still running after the shutdown timeout; unregistering anyway",
			"shutdown_timeout", el.cfg.ShutdownTimeout)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), el.cfg.ShutdownTimeout)
	defer cancel()
	if uerr := el.e.UnregisterCandidate(uctx, el.id); uerr != nil {
		el.log.Warn("election: unregistering failed; the lease and the candidate row will expire", "err", uerr)
	} else {
		el.log.Debug("election: unregistered")
	}
	return nil
}

// Resign gives up leadership without stopping: the Elector stops leading
// (cancelling the leader's context), waits for OnStartedLeading to return,
// then vacates the seat if it holds it (only the term it leads in, when it
// leads), which wakes the other candidates, and stays a candidate. Until
// the seat is vacated, and for its next tick after that, the Elector does
// not try to win (it only heartbeats and looks at the seat), unless a
// handoff wakes it after another candidate has held the seat (a wake-up
// that finds the seat as Resign left it changes nothing).
// Resigning while not leading waits for any leader work still running,
// vacates whatever lease the candidate holds, and makes the Elector skip
// its next tick.
//
// Called from OnStartedLeading with its context (or one derived from it),
// Resign cannot wait for its caller: it stops leading and returns nil at
// once, and the seat is vacated as soon as OnStartedLeading returns.
// Otherwise ctx bounds the wait for the leader's work and the database
// call. When ctx ends before OnStartedLeading returned, Resign returns
// ctx's error and leaves the seat as it is: the Elector has stopped
// leading, and its lease runs until it expires, or until a later round of
// the Elector, still a candidate, renews it. While Run runs, the request is carried out
// between two rounds; without Run it waits for the leader's work of a
// Run that has returned, then is Election.Resign.
func (el *Elector) Resign(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Resign: nil context", ErrInvalidOption)
	}
	el.mu.Lock()
	loopDone := el.loopDone
	el.mu.Unlock()
	term := int64(anyTerm)
	fromWork := ctx.Value(workKey{}) == el
	if loopDone != nil {
		req := resignRequest{reply: make(chan int64, 1)}
		select {
		case el.resign <- req:
			term = <-req.reply
		case <-loopDone:
			fromWork = false
		case <-ctx.Done():
			return fmt.Errorf("election: Resign: %w", ctx.Err())
		}
		if fromWork {
			// The caller is the leader's work, which cannot return while
			// it waits here: vacate once it has returned.
			go func() {
				defer el.resigned()
				vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), el.cfg.ShutdownTimeout+el.e.expire)
				defer cancel()
				select {
				case <-el.work.wait():
					if err := el.e.vacate(vctx, "Resign", el.id, term, false, nil); err != nil {
						el.log.Warn("election: Resign: vacating the seat failed; the lease will expire", "err", err)
					}
				case <-vctx.Done():
				}
			}()
			return nil
		}
		defer el.resigned()
	}
	select {
	case <-el.work.wait():
	case <-ctx.Done():
		el.log.Info("election: Resign: OnStartedLeading did not return before the context ended; the seat was not vacated")
		return fmt.Errorf("election: Resign: waiting for OnStartedLeading to return: %w", ctx.Err())
	}
	return el.e.vacate(ctx, "Resign", el.id, term, false, nil)
}

// resigned ends a Resign that doResign began: rounds may elect again.
func (el *Elector) resigned() {
	el.mu.Lock()
	el.resigning--
	el.mu.Unlock()
}

// workKey marks the context of the leader's work with its Elector.
type workKey struct{}

// isResigning reports whether a Resign waits to vacate the seat.
func (el *Elector) isResigning() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.resigning > 0
}

// loop runs rounds until ctx ends.
func (el *Elector) loop(ctx context.Context) error {
	var (
		cause     = causeStart
		failures  int
		succeeded bool
		skip      bool             // Resign, or a term vacated by someone else: the next tick only observes
		sitOut    bool             // the skip is for a vacated term: handoff wakes do not end it
		resigned  = int64(anyTerm) // the term the last Resign vacated (anyTerm: none known)
		timer     *time.Timer
	)
	for {
		var err error
		if cause == causeAfterResign || el.isResigning() {
			err = el.observeRound(ctx)
		} else {
			err = el.electRound(ctx, cause)
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := el.jitter(el.cfg.Interval)
		edge := false
		if err != nil {
			if !succeeded && errors.Is(err, ErrNotMigrated) {
				el.log.Error("election: elector stopped", "err", err)
				return err
			}
			failures++
			wait = el.retryWait(failures)
			if errors.Is(err, ErrReadOnly) {
				el.log.Error("election: the database is read-only (a standby or a read-only server); nobody can lead until it accepts writes",
					"err", err, "failures", failures, "retry_in", wait)
			} else {
				el.log.Warn("election: round failed; retrying", "err", err, "failures", failures, "retry_in", wait)
			}
		} else {
			succeeded = true
			failures = 0
			if el.takeYielded() {
				// Another process vacated the seat in this Elector's term
				// (an operator moving leadership on): leave the seat to the
				// other candidates, which the vacate woke, for one tick.
				skip, sitOut = true, true
			} else if d, ok := el.edgeWait(wait); ok {
				wait, edge = d, true
			}
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		cause = 0
		for cause == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				switch {
				case skip:
					cause, skip, sitOut = causeAfterResign, false, false
				case err != nil:
					cause = causeRetry
				case edge:
					cause = causeEdge
				default:
					cause = causeTick
				}
			case src := <-el.wake:
				// Another candidate vacated the seat (never this one: it
				// is not woken by its own handoff). That ends a skip too,
				// unless the seat is still as this Elector's Resign left
				// it: the wake is then an echo of an earlier handoff or a
				// spurious one (a MySQL listener interrupted by another
				// process wakes every namespace of its pool).
				if el.IsLeader() || sitOut || skip && el.wokenInVain(ctx, resigned) {
					continue
				}
				// The seat is changing hands: take the locked path, which
				// waits for the vacating transaction (a local wake-up comes
				// before it commits) rather than read the old holder.
				el.e.forgetSeat()
				el.observeWake(src)
				timer.Stop()
				skip = false
				cause = causeWakeLocal
				if src == wakeNotify {
					cause = causeWakeNotify
				}
			case <-el.ousted:
				// Another process vacated this candidate's term: a round
				// now finds it out (the renewal fails) and stops leading,
				// instead of at the next tick.
				if !el.IsLeader() {
					continue
				}
				timer.Stop()
				cause = causeOusted
			case req := <-el.resign:
				resigned = el.doResign()
				req.reply <- resigned
				skip = true
				timer.Reset(el.jitter(el.cfg.Interval))
			}
		}
	}
}

// edgeMargin is how long after the local deadline of a lease's end a
// follower tries: it covers the time from sending the reading to the
// database reading its clock, and the coarseness of timers.
const edgeMargin = time.Millisecond

// edgeTries is how many rounds a follower runs at the end of one lease: a
// second one, at the remaining time the first read, when the first came
// before the database's end of the lease.
const edgeTries = 2

// edgeWait is crash failover at the lease's edge. After a round that saw
// another candidate's live lease, the follower knows when it ends: the
// remaining time by the database clock (expires_at minus the database's now,
// read together), counted from the local monotonic time at which the
// reading was sent. When that end comes before the next tick, the follower
// waits until then (plus edgeMargin) instead of tick, and tries at once: a
// crashed leader is replaced one lease after its last renewal, not at the
// next tick after that. It tries at most edgeTries times per lease: if the
// edge rounds find the seat still held (renewed, or not yet expired by the
// database clock, which decides), the next wait is a normal tick, so a
// clock that disagrees cannot make it spin.
func (el *Elector) edgeWait(tick time.Duration) (time.Duration, bool) {
	el.mu.Lock()
	l, leading := el.last, el.cur != nil
	el.mu.Unlock()
	if leading || l.Vacant() || l.Leader == el.id {
		return 0, false
	}
	tries := 0
	if sameLease(l, el.edgeLease) {
		tries = el.edgeTries
	}
	if tries >= edgeTries {
		return 0, false
	}
	until, ok := el.e.seatEnds(l.Leader)
	if !ok {
		return 0, false
	}
	d := time.Until(until) + edgeMargin
	if d >= tick {
		return 0, false
	}
	el.edgeLease, el.edgeTries = l, tries+1
	return max(d, 0), true
}

// sameLease reports whether a and b are one reading of a lease: same holder,
// term and expiry.
func sameLease(a, b Lease) bool {
	return a.Leader == b.Leader && a.Term == b.Term && a.ExpiresAt.Equal(b.ExpiresAt)
}

// attemptCtx bounds one round's database calls: never past the trust
// window when leading, and never longer than a trust window otherwise (a
// grant that took longer would not be trusted anyway).
func (el *Elector) attemptCtx(ctx context.Context, start time.Time) (context.Context, context.CancelFunc) {
	timeout := el.e.expire - el.cfg.SafetyMargin
	el.mu.Lock()
	if el.cur != nil {
		if left := el.cur.trustedUntil.Sub(start); left > 0 && left < timeout {
			timeout = left
		}
	}
	el.mu.Unlock()
	return context.WithTimeout(ctx, timeout)
}

func (el *Elector) beforeCall(ctx context.Context) error {
	if el.hooks.call != nil {
		return el.hooks.call(ctx)
	}
	return nil
}

func (el *Elector) report(cause roundCause, l Lease, err error) {
	if el.hooks.round != nil {
		el.hooks.round(roundReport{cause: cause, lease: l, err: err, leading: el.IsLeader()})
	}
}

// electRound runs one Elect and acts on the lease it returns.
func (el *Elector) electRound(ctx context.Context, cause roundCause) (err error) {
	var (
		lease   Lease
		started bool
	)
	start := el.now()
	defer func() {
		el.report(cause, lease, err)
		el.observeAttempt(start, lease, started, err)
	}()
	actx, cancel := el.attemptCtx(ctx, start)
	defer cancel()
	if err := el.beforeCall(actx); err != nil {
		return err
	}
	lease, yielded, err := el.e.campaign(actx, el.id, true, nil)
	if err != nil {
		return err
	}
	el.observe(lease)
	if !lease.HeldBy(el.id) {
		el.mu.Lock()
		switch {
		case yielded:
			el.yielded = true
			if el.cur != nil {
				el.stopLocked(stopVacated)
			}
		case el.cur != nil:
			el.stopLocked("the database names another leader")
		}
		el.mu.Unlock()
		return nil
	}
	trustedUntil := start.Add(el.e.expire - el.cfg.SafetyMargin)
	if !el.now().Before(trustedUntil) {
		el.mu.Lock()
		if el.cur != nil {
			el.stopLocked("the renewal returned after the trust window")
		}
		el.mu.Unlock()
		return fmt.Errorf("election: Elect took longer than the trust window (%v)", el.e.expire-el.cfg.SafetyMargin)
	}
	started = el.lead(ctx, lease, trustedUntil, cause)
	return nil
}

// stopVacated is the reason an Elector stops leading when another process
// vacated its term (VacateSeat, VacateLease, UnregisterCandidate of its id).
const stopVacated = "the seat was vacated by another process"

// takeYielded reports, once, that the last round found the Elector's term
// vacated by someone else.
func (el *Elector) takeYielded() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	y := el.yielded
	el.yielded = false
	return y
}

// wokenInVain reports whether the seat is still as the Resign that vacated
// term left it, vacant (or expired) in that term, so that a wake-up during
// the tick Resign skips announces nothing new: no other candidate has held
// the seat since. It reads the seat unlocked; false when the term is not
// known or the reading fails (the wake-up then ends the skip, as any
// other).
func (el *Elector) wokenInVain(ctx context.Context, term int64) bool {
	if term == anyTerm {
		return false
	}
	rctx, cancel := el.attemptCtx(ctx, el.now())
	defer cancel()
	s, err := el.e.peekSeat(rctx)
	return err == nil && !s.live() && s.term == term
}

// observeRound is the tick after Resign: keep the candidate row alive and
// look at the seat, without trying to win it.
func (el *Elector) observeRound(ctx context.Context) (err error) {
	var lease Lease
	start := el.now()
	defer func() {
		el.report(causeAfterResign, lease, err)
		el.observeAttempt(start, lease, false, err)
	}()
	actx, cancel := el.attemptCtx(ctx, start)
	defer cancel()
	if err := el.beforeCall(actx); err != nil {
		return err
	}
	if err := el.e.Heartbeat(actx, el.id); err != nil {
		return err
	}
	if lease, err = el.e.Leader(actx); err != nil {
		return err
	}
	el.observe(lease)
	return nil
}

// doResign stops leading and returns the term Resign is to vacate once
// the leader's work has returned; until Resign is done (resigned), rounds
// only observe, so the Elector cannot renew or win the seat in between. A
// leader vacates only the term it leads in, which its rounds keep current;
// an Elector that is not leading knows no term and vacates whatever its
// candidate holds (a lease granted by a round whose answer was lost, for
// which no work runs).
func (el *Elector) doResign() int64 {
	term := int64(anyTerm)
	el.mu.Lock()
	defer el.mu.Unlock()
	if el.cur != nil {
		term = el.cur.lease.Term
		el.stopLocked("resigned")
	}
	el.resigning++
	return term
}

// observe records a lease seen in a round and reports a change of leader or
// term.
func (el *Elector) observe(l Lease) {
	el.mu.Lock()
	el.last = l
	el.mu.Unlock()
	if el.seen && l.Leader == el.seenLeader && l.Term == el.seenTerm {
		return
	}
	el.seen, el.seenLeader, el.seenTerm = true, l.Leader, l.Term
	if cb := el.cfg.OnNewLeader; cb != nil {
		el.events.push(func() { cb(l) })
	}
}

// lead starts leading, or extends the trust window of the current term.
// It reports whether a new leadership began.
func (el *Elector) lead(ctx context.Context, l Lease, trustedUntil time.Time, cause roundCause) bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.renewed = el.now()
	if c := el.cur; c != nil {
		if c.lease.Leader == l.Leader && c.lease.Term == l.Term {
			c.lease.ExpiresAt = l.ExpiresAt
			c.trustedUntil = trustedUntil
			el.kickWatch()
			return false
		}
		el.stopLocked("a new term began")
	}
	lctx, cancel := context.WithCancel(context.WithValue(ctx, workKey{}, el))
	cur := &leadership{lease: l, trustedUntil: trustedUntil, cancel: cancel, since: el.renewed}
	el.cur = cur
	el.kickWatch()
	el.log.Info("election: leading", "term", l.Term, "lease_expires_at", l.ExpiresAt, "round", cause.String())
	el.observeStart(cur)
	if cb := el.cfg.OnStartedLeading; cb != nil {
		el.work.add()
		el.events.startWork(func() {
			el.working.Add(1)
			defer el.working.Add(-1)
			defer el.work.done()
			cb(lctx, l)
		})
	}
	return true
}

// stopLocked ends the current leadership; el.mu must be held.
func (el *Elector) stopLocked(reason string) {
	c := el.cur
	el.cur = nil
	el.led = c.lease
	c.cancel()
	el.kickWatch()
	el.log.Info("election: stopped leading", "term", c.lease.Term, "reason", reason)
	el.observeStop(c, reason)
	if cb := el.cfg.OnStoppedLeading; cb != nil {
		l := c.lease
		el.events.push(func() { cb(l) })
	}
}

func (el *Elector) kickWatch() {
	select {
	case el.kick <- struct{}{}:
	default:
	}
}

// watch ends leadership when its trust window passes, whatever the loop is
// doing.
func (el *Elector) watch(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var fire <-chan time.Time
		el.mu.Lock()
		if el.cur != nil {
			t.Reset(el.cur.trustedUntil.Sub(el.now()))
			fire = t.C
		} else {
			t.Stop()
		}
		el.mu.Unlock()
		select {
		case <-stop:
			return
		case <-el.kick:
		case <-fire:
			el.mu.Lock()
			if el.cur != nil && !el.cur.trusted(el.now()) {
				el.log.Warn("election: no renewal within the trust window; stepping down before the lease can expire",
					"term", el.cur.lease.Term)
				el.stopLocked("trust window passed")
			}
			el.mu.Unlock()
		}
	}
}

// pokeOusted wakes the loop of a leading Elector whose term another
// process vacated; wake-ups coalesce.
func (el *Elector) pokeOusted() {
	select {
	case el.ousted <- struct{}{}:
	default:
	}
}

// poke wakes the loop for a handoff; wake-ups coalesce.
func (el *Elector) poke(src wakeSource) {
	select {
	case el.wake <- src:
	default:
	}
}

// jitter returns a duration between 0.8 d and d.
func (el *Elector) jitter(d time.Duration) time.Duration {
	spread := d / 5
	if spread <= 0 {
		return d
	}
	return d - rand.N(spread)
}

// retryWait is the backoff after failures consecutive failed rounds:
// Interval/8 (at least 1 ms) doubling up to Interval, ±20%.
func (el *Elector) retryWait(failures int) time.Duration {
	b := backoff{first: max(el.cfg.Interval/8, time.Millisecond), max: el.cfg.Interval, jitter: 0.2}
	return b.wait(failures)
}

// dispatcher runs callbacks in order on one goroutine.
type dispatcher struct {
	mu     sync.Mutex
	queue  []func()
	closed bool
	signal chan struct{} // cap 1
	done   chan struct{} // closed when run returns

	// work is closed when the latest OnStartedLeading returned; touched
	// only by run's goroutine (and by wait after done).
	work chan struct{}
}

func newDispatcher() *dispatcher {
	return &dispatcher{signal: make(chan struct{}, 1), done: make(chan struct{})}
}

func (d *dispatcher) push(f func()) {
	d.mu.Lock()
	d.queue = append(d.queue, f)
	d.mu.Unlock()
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

// startWork queues the start of leader work: once the previous work has
// returned, f runs on a goroutine of its own.
func (d *dispatcher) startWork(f func()) {
	d.push(func() {
		if d.work != nil {
			<-d.work
		}
		done := make(chan struct{})
		d.work = done
		go func() {
			defer close(done)
			f()
		}()
	})
}

// close makes run return once the queue is empty.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			closed := d.closed
			d.mu.Unlock()
			if closed {
				return
			}
			<-d.signal
			continue
		}
		f := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		d.mu.Unlock()
		f()
	}
}

// wait waits until run returned and the last leader work returned, or
// timeout fires; it reports whether everything finished.
func (d *dispatcher) wait(timeout <-chan time.Time) bool {
	select {
	case <-d.done:
	case <-timeout:
		return false
	}
	if d.work == nil {
		return true
	}
	select {
	case <-d.work:
		return true
	case <-timeout:
		return false
	}
}

// workCount counts the OnStartedLeading calls queued or running, so that the
// seat is vacated only when none is.
type workCount struct {
	mu    sync.Mutex
	n     int
	empty chan struct{} // closed while n == 0
}

func newWorkCount() *workCount {
	c := &workCount{empty: make(chan struct{})}
	close(c.empty)
	return c
}

func (c *workCount) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.empty = make(chan struct{})
	}
	c.n++
}

func (c *workCount) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.empty)
	}
}

// wait returns a channel closed once no work is queued or running.
func (c *workCount) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.empty
}

func (c *workCount) idle() bool {
	select {
	case <-c.wait():
		return true
	default:
		return false
	}
}
