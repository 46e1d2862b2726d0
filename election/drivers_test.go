package election

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// The behaviour every driver of the engine shares, tested once for each:
// an Elector, a Group of the one namespace under test, and a Group of that
// namespace and two more. Every candidate of a test is of the same kind;
// what a test asserts is the same for all three, events and stop reasons
// included, which is the parity the engine promises.

// driverKind is a way to run a candidate.
type driverKind struct {
	name  string
	group bool
	extra int // namespaces a Group joins besides the one under test
}

var driverKinds = []driverKind{{name: "elector"}, {name: "group-one", group: true}, {name: "group-many", group: true, extra: 2}}

// forDrivers runs fn for every driver kind on every configured database.
func forDrivers(t *testing.T, fn func(t *testing.T, k driverKind, tg testdb.Target)) {
	for _, k := range driverKinds {
		t.Run(k.name, func(t *testing.T) {
			for _, tg := range testdb.Targets(t) {
				t.Run(tg.Name, func(t *testing.T) { fn(t, k, tg) })
			}
		})
	}
}

// candOpts are a candidate's settings.
type candOpts struct {
	expire, interval time.Duration
	clock            clock // nil: the system clock
	// work is the leader's work in the namespace under test; nil: wait
	// for ctx. It reports when it returns.
	work func(ctx context.Context, c *cand, l Lease)
	// hook runs before each database call, after the pause.
	hook func(ctx context.Context) error
}

// devent is what a candidate did in the namespace under test: a callback
// ("started", "work-done", "stopped", "new-leader"), an observer call
// ("obs-started", "obs-stopped", "stepped-down", "wake"), or a result its
// machine settled ("settled").
type devent struct {
	kind    string
	lease   Lease
	reason  StopReason // obs-stopped
	cause   roundCause // settled
	started bool       // settled: a leadership began
	err     error      // settled
}

// cand is one candidate of a driver kind, running.
type cand struct {
	t      *testing.T
	name   string
	k      driverKind
	ns     string
	el     *Elector
	g      *Group
	ev     stream[devent]
	paused atomic.Bool   // calls wait while set
	resume chan struct{} // closed to let paused calls go (replaced by pause)
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// candObserver records the observer calls of ns.
type candObserver struct {
	c *cand
}

func (o candObserver) Attempt(Attempt) {}
func (o candObserver) LeadershipStarted(l Leadership) {
	if l.Namespace == o.c.ns {
		o.c.ev.add(devent{kind: "obs-started", lease: l.Lease})
	}
}
func (o candObserver) LeadershipStopped(l Leadership) {
	if l.Namespace == o.c.ns {
		o.c.ev.add(devent{kind: "obs-stopped", lease: l.Lease, reason: l.Reason})
	}
}
func (o candObserver) SteppedDown(l Leadership) {
	if l.Namespace == o.c.ns {
		o.c.ev.add(devent{kind: "stepped-down", lease: l.Lease})
	}
}
func (o candObserver) HandoffWake(w Wake) {
	if w.Namespace == o.c.ns {
		o.c.ev.add(devent{kind: "wake"})
	}
}

// newCand makes and runs a candidate of kind k in ns on db.
func newCand(t *testing.T, k driverKind, db *gorm.DB, ns, name string, o candOpts) *cand {
	t.Helper()
	c := &cand{t: t, name: name, k: k, ns: ns, resume: make(chan struct{})}
	close(c.resume)
	if o.expire == 0 {
		o.expire = 2 * time.Second
	}
	if o.interval == 0 {
		o.interval = o.expire / 4
	}
	onStarted := func(ctx context.Context, l Lease) {
		if l.Namespace != ns {
			<-ctx.Done()
			return
		}
		c.ev.add(devent{kind: "started", lease: l})
		if o.work != nil {
			o.work(ctx, c, l)
		} else {
			<-ctx.Done()
		}
		c.ev.add(devent{kind: "work-done", lease: l})
	}
	onStopped := func(l Lease) {
		if l.Namespace == ns {
			c.ev.add(devent{kind: "stopped", lease: l})
		}
	}
	onNew := func(l Lease) {
		if l.Namespace == ns {
			c.ev.add(devent{kind: "new-leader", lease: l})
		}
	}
	hook := func(ctx context.Context) error {
		if c.paused.Load() {
			c.mu.Lock()
			ch := c.resume
			c.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if o.hook != nil {
			return o.hook(ctx)
		}
		return nil
	}
	settled := func(r result, started bool, err error) {
		c.ev.add(devent{kind: "settled", lease: r.lease, cause: r.cause, started: started, err: err})
	}
	opts := []Option{WithExpire(o.expire), WithLogger(silent), WithObserver(candObserver{c})}
	var m *machine
	if k.group {
		nss := []string{ns}
		for i := range k.extra {
			nss = append(nss, fmt.Sprintf("%s.x%d", ns, i))
		}
		g, err := NewGroup(electorCtx(t), db, uuid.New(), GroupConfig{Namespaces: nss, Interval: o.interval,
			OnStartedLeading: onStarted, OnStoppedLeading: onStopped, OnNewLeader: onNew}, opts...)
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		if o.clock != nil {
			g.useClock(o.clock)
		}
		g.hooks.call = hook
		c.g, m = g, g.members[ns].m
	} else {
		e := newTestElection(t, db, ns, o.expire, opts...)
		el, err := e.NewElector(uuid.New(), ElectorConfig{Interval: o.interval,
			OnStartedLeading: onStarted, OnStoppedLeading: onStopped, OnNewLeader: onNew})
		if err != nil {
			t.Fatalf("NewElector: %v", err)
		}
		if o.clock != nil {
			el.useClock(o.clock)
		}
		el.hooks.call = hook
		c.el, m = el, el.m
	}
	m.settled = settled
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan error, 1)
	go func() {
		if c.g != nil {
			c.done <- c.g.Run(ctx)
		} else {
			c.done <- c.el.Run(ctx)
		}
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *cand) id() uuid.UUID {
	if c.g != nil {
		return c.g.ID()
	}
	return c.el.ID()
}

func (c *cand) isLeader() bool {
	if c.g != nil {
		return c.g.IsLeader(c.ns)
	}
	return c.el.IsLeader()
}

func (c *cand) resign(ctx context.Context) error {
	if c.g != nil {
		return c.g.Resign(ctx, c.ns)
	}
	return c.el.Resign(ctx)
}

// stop ends Run and waits for it, once.
func (c *cand) stop() {
	c.cancel()
	c.setPaused(false)
	if c.done == nil {
		return
	}
	select {
	case err := <-c.done:
		if err != nil {
			c.t.Errorf("%s: Run: %v", c.name, err)
		}
	case <-time.After(waitLimit):
		c.t.Errorf("%s: Run did not return", c.name)
	}
	c.done = nil
}

// setPaused makes the candidate's calls wait (a process paused, a network
// stalled), or lets them go.
func (c *cand) setPaused(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on && !c.paused.Load() {
		c.resume = make(chan struct{})
	}
	if !on && c.paused.Load() {
		close(c.resume)
	}
	c.paused.Store(on)
}

func (c *cand) wait(what string, from int, pred func(devent) bool) (devent, int) {
	c.t.Helper()
	return c.ev.wait(c.t, c.name+": "+what, from, pred)
}

// waitLeading waits for OnStartedLeading in the namespace under test.
func (c *cand) waitLeading(from int) (Lease, int) {
	c.t.Helper()
	ev, i := c.wait("to lead", from, func(ev devent) bool { return ev.kind == "started" })
	return ev.lease, i
}

// won returns the settled result that began the leadership of term.
func (c *cand) won(term int64) devent {
	c.t.Helper()
	ev, _ := c.wait(fmt.Sprintf("the grant of term %d", term), 0, func(ev devent) bool {
		return ev.kind == "settled" && ev.started && ev.lease.Term == term
	})
	return ev
}

// kinds returns the kinds of c's events from index from, settled results
// and observations of the seat left out.
func (c *cand) kinds(from int) []string {
	var out []string
	for _, ev := range c.ev.snapshot()[from:] {
		switch ev.kind {
		case "settled", "new-leader", "wake":
		case "obs-stopped":
			out = append(out, "obs-stopped:"+string(ev.reason))
		default:
			out = append(out, ev.kind)
		}
	}
	return out
}

// stoppedFor waits for the observer's report that c's leadership of term
// ended, and returns its reason.
func (c *cand) stoppedFor(term int64) StopReason {
	c.t.Helper()
	ev, _ := c.wait(fmt.Sprintf("the end of term %d", term), 0, func(ev devent) bool {
		return ev.kind == "obs-stopped" && ev.lease.Term == term
	})
	return ev.reason
}

// seat reads the namespace's seat.
func seatOf(t *testing.T, db *gorm.DB, ns string) Lease {
	t.Helper()
	l, err := newTestElection(t, db, ns, time.Second).Leader(electorCtx(t))
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return l
}

// TestDriversHandoff: a leader's Run returning hands the seat over: the
// follower, woken in this process, leads the next term before the old
// lease would have expired. The old leader reports StopShutdown.
func TestDriversHandoff(t *testing.T) {
	forDrivers(t, func(t *testing.T, k driverKind, tg testdb.Target) {
		_, db := testdb.Shared(t, tg)
		ns := testdb.Namespace(t)
		opts := candOpts{expire: 10 * time.Second, interval: 3 * time.Second}
		a := newCand(t, k, db, ns, "A", opts)
		la, _ := a.waitLeading(0)
		b := newCand(t, k, db, ns, "B", opts)
		b.wait("to see A lead", 0, func(ev devent) bool { return ev.kind == "new-leader" && ev.lease.HeldBy(a.id()) })

		a.stop()
		lb, _ := b.waitLeading(0)
		if lb.Term != la.Term+1 || !lb.AcquiredAt.Before(la.ExpiresAt) {
			t.Errorf("B leads %+v; want term %d, begun before A's lease would have expired (%v)", lb, la.Term+1, la.ExpiresAt)
		}
		if won := b.won(lb.Term); won.cause != causeWakeLocal && won.cause != causeWakeNotify {
			t.Errorf("B won in a %s round or attempt, want a handoff wake-up's", won.cause)
		}
		if got, want := a.kinds(0), []string{"obs-started", "started", "obs-stopped:shutdown", "stopped", "work-done"}; !sameKinds(got, want) {
			t.Errorf("A's events %v, want %v (in any order after obs-started)", got, want)
		}
	})
}

// sameKinds reports whether got has want's first element first and the
// same elements in some order (callbacks and observer calls run on
// different goroutines).
func sameKinds(got, want []string) bool {
	if len(got) != len(want) || len(got) == 0 || got[0] != want[0] {
		return false
	}
	a, b := slices.Clone(got), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestDriversCrashFailover: a leader whose calls all fail (a crash, as far
// as the database can tell) steps down by its trust window, and the
// follower takes the seat at the lease's edge by the database clock,
// never before it.
func TestDriversCrashFailover(t *testing.T) {
	forDrivers(t, func(t *testing.T, k driverKind, tg testdb.Target) {
		_, db := testdb.Shared(t, tg)
		ns := testdb.Namespace(t)
		opts := candOpts{expire: 1500 * time.Millisecond, interval: 600 * time.Millisecond}
		a := newCand(t, k, db, ns, "A", opts)
		la, _ := a.waitLeading(0)
		b := newCand(t, k, db, ns, "B", opts)
		b.wait("to see A lead", 0, func(ev devent) bool { return ev.kind == "new-leader" && ev.lease.HeldBy(a.id()) })

		a.setPaused(true) // every call of A's waits from now on: a crash
		fromB := len(b.ev.snapshot())
		time.Sleep(10 * time.Millisecond)
		last := seatOf(t, db, ns)
		if !last.HeldBy(a.id()) {
			t.Fatalf("the seat before the crash: %+v, want A's", last)
		}
		if r := a.stoppedFor(la.Term); r != StopSteppedDown {
			t.Errorf("A stopped leading for %q, want %q", r, StopSteppedDown)
		}
		a.wait("the step-down's report", 0, func(ev devent) bool { return ev.kind == "stepped-down" })
		lb, _ := b.waitLeading(0)
		won := b.won(lb.Term)
		if lb.Term != last.Term+1 || lb.AcquiredAt.Before(last.ExpiresAt) {
			t.Errorf("B leads %+v; want term %d, not before A's lease expired (%v)", lb, last.Term+1, last.ExpiresAt)
		}
		switch {
		case won.cause == causeEdge || won.cause == causeTick:
		case won.cause == causeWakeNotify && tg.Name == "mysql":
			// On MySQL and MariaDB a vacate anywhere in the schema
			// (another test's shutdown) wakes every listening process in
			// every namespace, and such a wake-up may reach B after the
			// lease ended, before its edge. A, paused, sends nothing: B
			// must have been told of that wake-up.
			b.wait("the wake-up it won in", fromB, func(ev devent) bool { return ev.kind == "wake" })
		default:
			t.Errorf("B won in a %s round or attempt, want one at the lease's edge (or, rarely, a tick)", won.cause)
		}
		a.setPaused(false)
	})
}

// TestDriversSitOut: a leader whose term an operator vacates stops with
// StopVacated and sits out, however it learns of the vacate: at once (the
// vacate names it), or at its next round, finding another candidate in a
// newer term. Two vacates in quick succession move leadership to the
// third candidate, never back to the first.
func TestDriversSitOut(t *testing.T) {
	for _, paused := range []bool{false, true} {
		name := "told"
		if paused {
			name = "another-leader"
		}
		t.Run(name, func(t *testing.T) {
			forDrivers(t, func(t *testing.T, k driverKind, tg testdb.Target) {
				_, db := testdb.Shared(t, tg)
				ns := testdb.Namespace(t)
				op := newTestElection(t, db, ns, time.Second)
				ctx := electorCtx(t)
				opts := candOpts{expire: 8 * time.Second, interval: 2 * time.Second}
				a := newCand(t, k, db, ns, "A", opts)
				la, _ := a.waitLeading(0)
				others := []*cand{newCand(t, k, db, ns, "B", opts), newCand(t, k, db, ns, "C", opts)}
				for _, o := range others {
					o.wait("to see A lead", 0, func(ev devent) bool { return ev.kind == "new-leader" && ev.lease.HeldBy(a.id()) })
				}
				if paused {
					// A hears nothing until another candidate leads.
					a.setPaused(true)
				}
				if _, err := op.VacateLease(ctx, la); err != nil {
					t.Fatalf("VacateLease of A's term: %v", err)
				}
				// One of the others takes the seat: X.
				var x, y *cand
				deadline := time.Now().Add(waitLimit)
				for x == nil {
					for i, o := range others {
						if l := seatOf(t, db, ns); l.HeldBy(o.id()) && l.Term == la.Term+1 {
							x, y = o, others[1-i]
						}
					}
					if time.Now().After(deadline) {
						t.Fatalf("nobody took the seat A was vacated from: %+v", seatOf(t, db, ns))
					}
					time.Sleep(5 * time.Millisecond)
				}
				lx, _ := x.waitLeading(0)
				a.setPaused(false)
				if r := a.stoppedFor(la.Term); r != StopVacated {
					t.Errorf("A stopped leading for %q, want %q", r, StopVacated)
				}
				// At once, a second vacate: of X's term.
				if _, err := op.VacateLease(ctx, lx); err != nil {
					t.Fatalf("VacateLease of %s's term: %v", x.name, err)
				}
				ly, _ := y.waitLeading(0)
				if ly.Term != lx.Term+1 {
					t.Errorf("%s leads term %d, want %d", y.name, ly.Term, lx.Term+1)
				}
				if r := x.stoppedFor(lx.Term); r != StopVacated {
					t.Errorf("%s stopped leading for %q, want %q", x.name, r, StopVacated)
				}
				if l := seatOf(t, db, ns); !l.HeldBy(y.id()) || l.Term != ly.Term {
					t.Errorf("the seat after two vacates: %+v; want %s's term %d", l, y.name, ly.Term)
				}
				for _, c := range []*cand{a, x} {
					if n := len(slices.DeleteFunc(c.kinds(0), func(k string) bool { return k != "started" })); n != 1 {
						t.Errorf("%s led %d times, want once: it took a seat back during its sit-out", c.name, n)
					}
				}
			})
		})
	}
}

// TestDriversResignFromWork: the leader's work gives its leadership up from
// inside (Resign, or for a Group Leave too): the call returns at once, the
// seat stays in the leader's term while the work runs, and is vacated once
// the work has returned, never before; the follower then leads the next
// term.
func TestDriversResignFromWork(t *testing.T) {
	for _, how := range []string{"resign", "leave"} {
		t.Run(how, func(t *testing.T) {
			forDrivers(t, func(t *testing.T, k driverKind, tg testdb.Target) {
				if how == "leave" && !k.group {
					t.Skip("an Elector leaves by its Run returning")
				}
				_, db := testdb.Shared(t, tg)
				ns := testdb.Namespace(t)
				clockOf := newTestElection(t, db, ns, time.Second)
				release := make(chan struct{})
				called := make(chan error, 1)
				ended := make(chan time.Time, 1)
				var once sync.Once
				work := func(ctx context.Context, c *cand, l Lease) {
					first := false
					once.Do(func() { first = true })
					if !first {
						<-ctx.Done()
						return
					}
					if how == "leave" {
						called <- c.g.Leave(ctx, c.ns)
					} else {
						called <- c.resign(ctx)
					}
					<-release
					now, err := clockOf.Now(context.Background())
					if err != nil {
						c.t.Errorf("reading the database clock: %v", err)
					}
					ended <- now
				}
				a := newCand(t, k, db, ns, "A", candOpts{expire: 10 * time.Second, interval: 3 * time.Second, work: work})
				la, _ := a.waitLeading(0)
				b := newCand(t, k, db, ns, "B", candOpts{expire: 10 * time.Second, interval: 3 * time.Second})
				var err error
				select {
				case err = <-called:
				case <-time.After(waitLimit):
					t.Fatal("the call from the leader's work did not return")
				}
				if err != nil {
					t.Fatalf("%s from the leader's work: %v", how, err)
				}
				if a.isLeader() {
					t.Errorf("A leads after its %s returned", how)
				}
				time.Sleep(50 * time.Millisecond)
				if l := seatOf(t, db, ns); !l.HeldBy(a.id()) || l.Term != la.Term {
					t.Errorf("while the work runs: seat %+v; want A's term %d kept", l, la.Term)
				}
				close(release)
				end := <-ended
				lb, _ := b.waitLeading(0)
				if lb.Term != la.Term+1 || lb.AcquiredAt.Before(end) || !lb.AcquiredAt.Before(la.ExpiresAt) {
					t.Errorf("B leads %+v; want term %d begun after A's work ended (%v) and before A's lease expired", lb, la.Term+1, end)
				}
				want := StopResigned
				if how == "leave" {
					want = StopLeft
				}
				if r := a.stoppedFor(la.Term); r != want {
					t.Errorf("A stopped leading for %q, want %q", r, want)
				}
			})
		})
	}
}

// TestDriversTrustWindow, on a stub clock: a leader whose renewals do not
// come steps down when its trust window passes, reporting SteppedDown and
// StopSteppedDown, though its lease is still live in the database; and a
// grant that comes back with less trust left than one renewal period is
// renewed at once, not at the next tick, so it costs no step-down.
func TestDriversTrustWindow(t *testing.T) {
	forDrivers(t, func(t *testing.T, k driverKind, tg testdb.Target) {
		_, db := testdb.Shared(t, tg)
		const expire = 30 * time.Second
		trust := expire - expire/5
		renewEvery := expire / 3

		t.Run("step-down", func(t *testing.T) {
			ns := testdb.Namespace(t)
			clock := newFakeClock()
			a := newCand(t, k, db, ns, "A", candOpts{expire: expire, clock: clock})
			la, _ := a.waitLeading(0)
			a.setPaused(true)
			clock.Advance(trust - time.Nanosecond)
			if !a.isLeader() {
				t.Fatal("A stopped leading inside its trust window")
			}
			clock.Advance(time.Nanosecond)
			if r := a.stoppedFor(la.Term); r != StopSteppedDown {
				t.Errorf("A stopped leading for %q, want %q", r, StopSteppedDown)
			}
			if a.isLeader() {
				t.Error("A leads after its trust window")
			}
			if l := seatOf(t, db, ns); !l.HeldBy(a.id()) || l.Term != la.Term {
				t.Errorf("the seat after the step-down: %+v; want A's term %d still live by the database clock", l, la.Term)
			}
			// OnStoppedLeading and the work's end come after the
			// observer's stop, from other goroutines.
			a.wait("the work to end", 0, func(ev devent) bool { return ev.kind == "work-done" })
			a.wait("OnStoppedLeading", 0, func(ev devent) bool { return ev.kind == "stopped" })
			if got, want := a.kinds(0), []string{"obs-started", "started", "stepped-down", "obs-stopped:stepped_down", "stopped", "work-done"}; !sameKinds(got, want) {
				t.Errorf("A's events %v, want %v", got, want)
			}
			a.setPaused(false)
		})

		t.Run("late-grant", func(t *testing.T) {
			ns := testdb.Namespace(t)
			clock := newFakeClock()
			// The grant answers late: the clock moves on during the call
			// that takes the seat, an Elector's first round or a Group's
			// first attempt. The attempt is the Group's first call once a
			// round wrote its candidate row in ns. A first round that
			// failed (the shared database busy) writes none, and its
			// retry waits on the clock: until a round wrote the row, the
			// clock is moved on a second at a time, which no call of
			// this test measures.
			joined := func() bool {
				var n int64
				err := db.WithContext(context.Background()).Raw("SELECT COUNT(*) FROM election_candidates WHERE namespace = ?", ns).Scan(&n).Error
				return err == nil && n > 0
			}
			var advanced atomic.Bool
			if k.extra > 0 {
				// The Group's other namespaces are led by another
				// candidate, so that its first attempt is on ns.
				for i := range k.extra {
					other := newTestElection(t, db, fmt.Sprintf("%s.x%d", ns, i), expire)
					if _, err := other.Elect(electorCtx(t), uuid.New()); err != nil {
						t.Fatal(err)
					}
				}
			}
			late := trust - renewEvery/2
			if k.group {
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(200 * time.Millisecond):
						}
						if joined() {
							return
						}
						clock.Advance(time.Second)
					}
				}()
			}
			b := newCand(t, k, db, ns, "B", candOpts{expire: expire, clock: clock, hook: func(context.Context) error {
				if !advanced.Load() && (!k.group || joined()) && advanced.CompareAndSwap(false, true) {
					clock.Advance(late)
				}
				return nil
			}})
			lb, _ := b.waitLeading(0)
			renew, _ := b.wait("the renewal at once", 0, func(ev devent) bool {
				return ev.kind == "settled" && ev.cause == causeRenew && ev.lease.HeldBy(b.id()) && ev.err == nil
			})
			if renew.lease.Term != lb.Term {
				t.Errorf("renewed term %d, want %d", renew.lease.Term, lb.Term)
			}
			clock.Advance(renewEvery/2 + time.Millisecond)
			if !b.isLeader() {
				t.Error("B stepped down: the late grant was not renewed in time")
			}
			if n := len(slices.DeleteFunc(b.kinds(0), func(k string) bool { return k != "started" })); n != 1 {
				t.Errorf("B led %d times, want once", n)
			}
			if !advanced.Load() {
				t.Error("the clock never moved on during the grant")
			}
		})
	})
}
