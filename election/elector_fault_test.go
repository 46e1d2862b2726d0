package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/faultproxy"
	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// Fault tests: a TCP proxy between the Elector and PostgreSQL or MySQL cuts
// or stalls its connections. On SQLite, which has no network, the same
// faults are injected before each call (an error, or a call that hangs
// until its deadline).

func init() {
	// The driver logs every connection the proxy resets.
	_ = mysqldriver.SetLogger(log.New(io.Discard, "", 0))
}

// link is a way to break one Elector's path to the database.
type link interface {
	cut()   // calls fail at once
	stall() // calls hang until their deadline
	heal()
}

// proxyLink is a pool that reaches the database through a fault proxy.
type proxyLink struct{ p *faultproxy.Proxy }

func (l proxyLink) cut()   { l.p.Cut() }
func (l proxyLink) stall() { l.p.SetDelay(time.Minute) }
func (l proxyLink) heal() {
	l.p.SetDelay(0)
	l.p.Resume()
}

// hookLink injects the faults before each call of one Elector.
type hookLink struct{ mode atomic.Int32 } // 0 ok, 1 cut, 2 stall

var errLinkCut = errors.New("link cut")

func (l *hookLink) cut()   { l.mode.Store(1) }
func (l *hookLink) stall() { l.mode.Store(2) }
func (l *hookLink) heal()  { l.mode.Store(0) }
func (l *hookLink) install(el *Elector) {
	el.hooks.call = func(ctx context.Context) error {
		switch l.mode.Load() {
		case 1:
			return errLinkCut
		case 2:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// proxiedDB opens tg's database through a new fault proxy.
func proxiedDB(t *testing.T, tg testdb.Target) (*faultproxy.Proxy, *gorm.DB) {
	t.Helper()
	p, dsn, err := faultproxy.ForDSN(tg.DSN)
	if err != nil {
		t.Fatalf("starting the proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, testdb.OpenDSN(t, dsn)
}

// TestFaultStepDownBeforeExpiry: with its connections cut, or stalled, the
// leader stops leading (IsLeader false, leader context cancelled,
// OnStoppedLeading called) while its lease is still live by the database
// clock, read on a direct connection; it leads again once the database is
// back; and Run returns nil, with no goroutine left, when cancelled while
// the database is unreachable.
func TestFaultStepDownBeforeExpiry(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		for _, mode := range []string{"cut", "stall"} {
			t.Run(tg.Name+"/"+mode, func(t *testing.T) {
				direct := testdb.Open(t, tg)
				p, db := proxiedDB(t, tg)
				ns := testdb.Namespace(t)
				e := newTestElection(t, db, ns, 2*time.Second)
				if _, err := e.Leader(electorCtx(t)); err != nil {
					t.Fatal(err)
				}
				baseline := goleak.IgnoreCurrent()

				r := newRecordedElector(t, e, &seq{}, ElectorConfig{
					Interval: 300 * time.Millisecond, SafetyMargin: 800 * time.Millisecond, ShutdownTimeout: 500 * time.Millisecond,
				})
				stops := recordStepDowns(r)
				run := startRun(t, r.el)
				st, iSt := r.waitLeading(0)
				clock := readDBClock(t, direct)

				l := proxyLink{p}
				if mode == "cut" {
					l.cut()
				} else {
					l.stall()
				}
				r.waitEvent("the leader's work to end", iSt, func(ev event) bool { return ev.kind == "work-done" })
				checkStepDownInTime(t, clock, <-stops, direct, ns)

				l.heal()
				st2, _ := r.waitLeading(iSt + 1)
				if st2.lease.Term < st.lease.Term {
					t.Errorf("term went back: %d then %d", st.lease.Term, st2.lease.Term)
				}
				if !r.el.IsLeader() {
					t.Error("not leading after rejoining")
				}

				// Shut down while the database is unreachable: the final
				// unregister fails after ShutdownTimeout, Run still returns.
				l.cut()
				mustStop(t, run)
				if r.el.IsLeader() {
					t.Error("IsLeader true after Run returned")
				}
				goleak.VerifyNone(t, append([]goleak.Option{baseline}, ignoreDBGoroutines...)...)
			})
		}
	}
}

// TestFaultNoTwoLeaders: three Electors, each with its own path to the
// database, contend for one namespace while the leader's path is cut or
// stalled, again and again. A sampler reading IsLeader of all three never
// sees two leaders at once; every term has one holder; each old leader
// stopped before the database granted the next term (its step-down, mapped
// to the database clock, precedes the new lease's AcquiredAt), and its
// OnStoppedLeading ran before the next OnStartedLeading; the Electors cut
// off come back as candidates.
func TestFaultNoTwoLeaders(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			dsn, direct := testdb.Shared(t, tg)
			ns := testdb.Namespace(t)
			s := &seq{}
			const n = 3
			var (
				recs  []*recorder
				stops []*stream[stepDown]
				links []link
				all   stream[tagged]
			)
			for i := 0; i < n; i++ {
				var db *gorm.DB
				if tg.Name == "sqlite" {
					db = testdb.OpenDSN(t, dsn)
				} else {
					var p *faultproxy.Proxy
					p, db = proxiedDB(t, tg)
					links = append(links, proxyLink{p})
				}
				// A wide margin: the step-down is timed by when a callback
				// ran, which a loaded machine can delay. So can it delay the
				// final vacate: with a shutdown timeout of 500 ms, the lease
				// was once found live after every Elector had stopped, in a
				// CI run of every package at once.
				e := newTestElection(t, db, ns, 2*time.Second)
				r := newRecordedElector(t, e, s, ElectorConfig{
					Interval: 300 * time.Millisecond, SafetyMargin: 900 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
				})
				who := i
				r.tee = func(ev event) { all.add(tagged{ev, who}) }
				sd := &stream[stepDown]{}
				r.onStopped = func(l Lease) { sd.add(stepDown{at: time.Now(), lease: l, isLeader: r.el.IsLeader()}) }
				if tg.Name == "sqlite" {
					hl := &hookLink{}
					hl.install(r.el)
					links = append(links, hl)
				}
				recs, stops = append(recs, r), append(stops, sd)
			}
			clock := readDBClock(t, direct)

			// The sampler. A sample counts only if it took well under the
			// safety margin: a goroutine paused between two reads could
			// otherwise pair a reading from before a handover with one
			// from after it.
			var (
				samples, slow, violations atomic.Int64
				firstBad                  atomic.Value
				stop, sampled             = make(chan struct{}), make(chan struct{})
			)
			go func() {
				defer close(sampled)
				for {
					select {
					case <-stop:
						return
					default:
					}
					var leaders []int
					t0 := time.Now()
					for i, r := range recs {
						if r.el.IsLeader() {
							leaders = append(leaders, i)
						}
					}
					if time.Since(t0) > 50*time.Millisecond {
						slow.Add(1)
					} else {
						samples.Add(1)
						if len(leaders) > 1 {
							violations.Add(1)
							firstBad.CompareAndSwap(nil, fmt.Sprint(leaders))
						}
					}
					time.Sleep(500 * time.Microsecond)
				}
			}()

			var runs []*run
			for _, r := range recs {
				runs = append(runs, startRun(t, r.el))
			}
			const faults = 3
			for f := 0; f < faults; f++ {
				// The current leader, once there is one.
				st, _ := all.wait(t, "a leader", 0, func(ev tagged) bool {
					return ev.kind == "started" && recs[ev.who].el.IsLeader()
				})
				old, oldTerm := st.who, recs[st.who].el.Observed().Term
				from := all.len()
				if f%2 == 0 {
					links[old].cut()
				} else {
					links[old].stall()
				}
				next, _ := all.wait(t, "another Elector to take over", from, func(ev tagged) bool {
					return ev.kind == "started" && ev.who != old
				})
				sd, _ := stops[old].wait(t, "the old leader's step-down", 0, func(sd stepDown) bool { return sd.lease.Term == oldTerm })
				if sd.isLeader {
					t.Errorf("fault %d: IsLeader true in OnStoppedLeading", f)
				}
				if stopped := clock.latest(sd.at); !stopped.Before(next.lease.AcquiredAt) {
					t.Errorf("fault %d: Elector %d stopped at database time %v or before, not before Elector %d's term %d began at %v",
						f, old, stopped, next.who, next.lease.Term, next.lease.AcquiredAt)
				} else {
					t.Logf("fault %d: Elector %d (term %d) cut off, stopped at least %v before Elector %d's term %d began",
						f, old, oldTerm, next.lease.AcquiredAt.Sub(stopped), next.who, next.lease.Term)
				}
				links[old].heal()
			}
			// The Electors cut off came back as candidates.
			for i, r := range recs {
				from := r.rounds.len()
				r.waitRound(fmt.Sprintf("a successful round of Elector %d", i), from, func(rr roundReport) bool { return rr.err == nil })
			}
			for _, r := range runs {
				mustStop(t, r)
			}
			close(stop)
			<-sampled
			if v := violations.Load(); v > 0 {
				t.Errorf("%d of %d samples saw more than one leader (first: %v)", v, samples.Load(), firstBad.Load())
			}

			// Every term has one holder, and each OnStartedLeading comes
			// after the OnStoppedLeading of every other leader before it.
			holders := map[int64]int{}
			leading := map[int]bool{}
			terms := 0
			events := all.snapshot()
			sort.Slice(events, func(i, j int) bool { return events[i].seq < events[j].seq })
			for _, ev := range events {
				switch ev.kind {
				case "started":
					if h, ok := holders[ev.lease.Term]; ok && h != ev.who {
						t.Errorf("term %d held by Electors %d and %d", ev.lease.Term, h, ev.who)
					} else if !ok {
						terms++
					}
					holders[ev.lease.Term] = ev.who
					for other := range leading {
						if other != ev.who {
							t.Errorf("Elector %d started leading term %d before Elector %d stopped", ev.who, ev.lease.Term, other)
						}
					}
					leading[ev.who] = true
				case "stopped":
					delete(leading, ev.who)
				}
			}
			if terms < faults+1 {
				t.Errorf("%d terms, want at least %d", terms, faults+1)
			}
			// The seat was handed over on shutdown: nobody holds it.
			if live, expires, now := leaseLiveByDBClock(t, direct, ns); live {
				var (
					leader string
					term   int64
				)
				if err := direct.Raw("SELECT leader_id, term FROM election_leaders WHERE namespace = ?", ns).Row().Scan(&leader, &term); err != nil {
					t.Fatal(err)
				}
				who := -1
				for i, r := range recs {
					if r.el.ID().String() == leader {
						who = i
					}
				}
				t.Errorf("the lease is still live after every Elector stopped: Elector %d in term %d, %v before it expires", who, term, expires.Sub(now))
			}
			t.Logf("%d samples (%d slow ones left out), %d terms", samples.Load(), slow.Load(), terms)
		})
	}
}

// tagged is an event and the index of the Elector it came from.
type tagged struct {
	event
	who int
}

// TestHandoffAcrossPools: a candidate on another connection pool (as in
// another process) learns of the handoff from the database: on PostgreSQL
// by NOTIFY and on SQLite (Linux) by the notification file, before its tick,
// with an interval long enough that only the notification explains the
// takeover; on MySQL at its next tick, still
// before the old lease would have expired.
func TestHandoffAcrossPools(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.SkipWithoutNotifications(t, tg)
			dsn, dbA := testdb.Shared(t, tg)
			dbB := testdb.OpenDSN(t, dsn)
			if tg.Name == "sqlite" {
				// A SQLite listener holds no connection: one is enough.
				testdb.Raw(t, dbB).SetMaxOpenConns(1)
			}
			ns := testdb.Namespace(t)
			notify := testdb.WakesOtherPools(tg)
			expire, interval := 2*time.Second, 500*time.Millisecond
			if notify {
				expire, interval = 10*time.Second, 3*time.Second
			}
			s := &seq{}
			cfg := ElectorConfig{Interval: interval}
			a := newRecordedElector(t, newTestElection(t, dbA, ns, expire), s, cfg)
			b := newRecordedElector(t, newTestElection(t, dbB, ns, expire), s, cfg)
			runA := startRun(t, a.el)
			a.waitLeading(0)
			startRun(t, b.el)
			b.waitRound("B's first round", 0, func(rr roundReport) bool {
				return rr.cause == causeStart && rr.err == nil && rr.lease.HeldBy(a.el.ID())
			})
			if notify {
				select {
				case <-hubOf(t, b.el).Listening():
				case <-time.After(waitLimit):
					t.Fatal("B's hub is not listening")
				}
			}
			lastA := a.el.Observed()
			mustStop(t, runA)
			stB, _ := b.waitLeading(0)
			won, _ := b.waitRound("B's winning round", 0, func(rr roundReport) bool { return rr.lease.HeldBy(b.el.ID()) })
			want := causeTick
			if notify {
				want = causeWakeNotify
			}
			if won.cause != want {
				t.Errorf("B won in a %s round, want %s", won.cause, want)
			}
			if !stB.lease.AcquiredAt.Before(lastA.ExpiresAt) {
				t.Errorf("B acquired at %v, not before A's lease would have expired (%v)", stB.lease.AcquiredAt, lastA.ExpiresAt)
			}
		})
	}
}

func hubOf(t *testing.T, el *Elector) *handoff.Hub {
	t.Helper()
	h := handoff.Lookup(el.e.hubKey())
	if h == nil {
		t.Fatal("the Elector has no hub")
	}
	return h
}

// TestHandoffListener: one listener per pool, shared by its
// Electors, gone (connection and goroutine) when the last one stops; none
// on a pool too small to spare a connection.
func TestHandoffListener(t *testing.T) {
	var pg *testdb.Target
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "postgres" {
			pg = &tg
		}
	}
	if pg == nil {
		t.Skip("PostgreSQL not configured")
	}
	testdb.SkipWithoutNotifications(t, *pg)
	db := testdb.Open(t, *pg)
	ns := testdb.Namespace(t)
	e := newTestElection(t, db, ns, 3*time.Second)
	if _, err := e.Leader(electorCtx(t)); err != nil {
		t.Fatal(err)
	}
	baseline := goleak.IgnoreCurrent()
	s := &seq{}
	a := newRecordedElector(t, e, s, ElectorConfig{})
	b := newRecordedElector(t, e, s, ElectorConfig{})
	runA, runB := startRun(t, a.el), startRun(t, b.el)
	a.waitRound("A's first round", 0, func(roundReport) bool { return true })
	b.waitRound("B's first round", 0, func(roundReport) bool { return true })
	h := hubOf(t, a.el)
	if hubOf(t, b.el) != h {
		t.Fatal("two Electors of one Election have different hubs")
	}
	select {
	case <-h.Listening():
	case <-time.After(waitLimit):
		t.Fatal("not listening")
	}
	pool := testdb.Raw(t, db)
	if inUse := pool.Stats().InUse; inUse < 1 {
		t.Errorf("%d connections in use while listening, want the listener's", inUse)
	}
	mustStop(t, runA)
	mustStop(t, runB)
	if handoff.Lookup(e.hubKey()) != nil {
		t.Error("the hub outlived its Electors")
	}
	// The listening connection was discarded, not put back in the pool
	// still subscribed.
	if inUse := pool.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections in use after the Electors stopped", inUse)
	}
	ctx := electorCtx(t)
	var conns []*sql.Conn
	for i := pool.Stats().Idle; i > 0; i-- {
		c, err := pool.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var channels int
		if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_listening_channels()").Scan(&channels); err != nil {
			t.Fatal(err)
		}
		if channels != 0 {
			t.Errorf("a pooled connection still listens on %d channels", channels)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	goleak.VerifyNone(t, append([]goleak.Option{baseline}, ignoreDBGoroutines...)...)

	// A pool of two connections keeps both for elections.
	small := testdb.OpenDSN(t, pg.DSN)
	testdb.Raw(t, small).SetMaxOpenConns(2)
	c := newRecordedElector(t, newTestElection(t, small, ns, 3*time.Second), s, ElectorConfig{})
	startRun(t, c.el)
	c.waitLeading(0)
	if hubOf(t, c.el).Listening() != nil {
		t.Error("listening on a pool of two connections")
	}
}

// TestHandoffFromProtocolCalls: a leader that is not an Elector, giving up
// the seat with UnregisterCandidate or Resign, wakes the Electors too: in
// the same process through the shared pool, and from another pool through
// NOTIFY on PostgreSQL and the notification file on SQLite (Linux).
func TestHandoffFromProtocolCalls(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.SkipWithoutNotifications(t, tg)
			dsn, db := testdb.Shared(t, tg)
			other := testdb.OpenDSN(t, dsn)
			ns := testdb.Namespace(t)
			b := newRecordedElector(t, newTestElection(t, db, ns, 10*time.Second), &seq{}, ElectorConfig{Interval: 3 * time.Second})
			type handoffCase struct {
				name string
				db   *gorm.DB
				want roundCause
				quit func(e *Election, id uuid.UUID) error
			}
			unregister := func(e *Election, id uuid.UUID) error { return e.UnregisterCandidate(electorCtx(t), id) }
			resign := func(e *Election, id uuid.UUID) error { return e.Resign(electorCtx(t), id) }
			cases := []handoffCase{
				{"same pool, unregister", db, causeWakeLocal, unregister},
				{"same pool, resign", db, causeWakeLocal, resign},
			}
			if testdb.WakesOtherPools(tg) {
				cases = append(cases,
					handoffCase{"other pool, unregister", other, causeWakeNotify, unregister},
					handoffCase{"other pool, resign", other, causeWakeNotify, resign})
			}
			// B leads first; each case takes the seat from B with a plain
			// Elect after B resigned, then gives it up.
			run := startRun(t, b.el)
			b.waitLeading(0)
			if testdb.WakesOtherPools(tg) {
				select {
				case <-hubOf(t, b.el).Listening():
				case <-time.After(waitLimit):
					t.Fatal("B's hub is not listening")
				}
			}
			for _, c := range cases {
				e := newTestElection(t, c.db, ns, 10*time.Second)
				a := uuid.New()
				for try := 1; ; try++ {
					if err := b.el.Resign(electorCtx(t)); err != nil {
						t.Fatalf("%s: B's Resign: %v", c.name, err)
					}
					l, err := e.Elect(electorCtx(t), a)
					if err == nil && l.HeldBy(a) {
						break
					}
					// Wake-ups are hints that may come twice (in process and
					// through the database): a late one of the last case's
					// handoff may end B's sit-out before A's Elect, and B
					// then holds the seat again. Resign it once more.
					if err != nil || !l.HeldBy(b.el.ID()) || try == 3 {
						t.Fatalf("%s: Elect (try %d): %+v, %v", c.name, try, l, err)
					}
				}
				from := b.rounds.len()
				if err := c.quit(e, a); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				won, _ := b.waitRound(c.name+": B's winning round", from, func(rr roundReport) bool { return rr.lease.HeldBy(b.el.ID()) })
				inProcess := c.want == causeWakeLocal && wokenInProcess(t, b.el, won.cause)
				if won.cause != c.want && !inProcess {
					t.Errorf("%s: B won in a %s round, want %s", c.name, won.cause, c.want)
				}
			}
			mustStop(t, run)
		})
	}
}

// TestOneListenerPerPool: on PostgreSQL, Electors in several namespaces on
// one pool share one LISTEN connection, and a notification still wakes the
// Elector of the namespace it names (and only a notification could: the
// vacating candidate is on another pool, and the tick is 3 s away). The
// listener stops with the last hub.
func TestOneListenerPerPool(t *testing.T) {
	var pg *testdb.Target
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "postgres" {
			pg = &tg
		}
	}
	if pg == nil {
		t.Skip("PostgreSQL not configured")
	}
	testdb.SkipWithoutNotifications(t, *pg)
	dsn, db := testdb.Shared(t, *pg)
	other := testdb.OpenDSN(t, dsn)
	s := &seq{}
	var els []*recorder
	var runs []*run
	for range 3 {
		ns := testdb.Namespace(t)
		el := newRecordedElector(t, newTestElection(t, db, ns, 10*time.Second), s, ElectorConfig{Interval: 3 * time.Second})
		els = append(els, el)
		runs = append(runs, startRun(t, el.el))
	}
	for _, el := range els {
		el.waitRound("the first round", 0, func(roundReport) bool { return true })
	}
	h0 := hubOf(t, els[0].el)
	if h0.Listening() == nil {
		t.Fatal("no listener")
	}
	for _, el := range els[1:] {
		if !hubOf(t, el.el).SharesListener(h0) {
			t.Fatal("Electors of one pool in two namespaces have two listeners")
		}
	}
	if n := handoff.Listeners(testdb.Raw(t, db)); n != 1 {
		t.Errorf("%d listeners on the pool, want 1", n)
	}
	select {
	case <-hubOf(t, els[0].el).Listening():
	case <-time.After(waitLimit):
		t.Fatal("not listening")
	}
	for i, b := range els {
		b.waitLeading(0)
		e := newTestElection(t, other, b.el.e.Namespace(), 10*time.Second)
		a := uuid.New()
		if err := b.el.Resign(electorCtx(t)); err != nil {
			t.Fatalf("namespace %d: Resign: %v", i, err)
		}
		if l, err := e.Elect(electorCtx(t), a); err != nil || !l.HeldBy(a) {
			t.Fatalf("namespace %d: Elect on the other pool: %+v, %v", i, l, err)
		}
		from := b.rounds.len()
		if err := e.UnregisterCandidate(electorCtx(t), a); err != nil {
			t.Fatal(err)
		}
		won, _ := b.waitRound(fmt.Sprintf("namespace %d: the winning round", i), from, func(rr roundReport) bool { return rr.lease.HeldBy(b.el.ID()) })
		if won.cause != causeWakeNotify {
			t.Errorf("namespace %d: won in a %s round, want %s", i, won.cause, causeWakeNotify)
		}
	}
	for _, r := range runs {
		mustStop(t, r)
	}
	if handoff.Listeners(testdb.Raw(t, db)) != 0 {
		t.Error("the listener outlived its hubs")
	}
}
