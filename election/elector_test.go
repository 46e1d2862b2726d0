package election

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// The Elector's tests live in package election to reach its test hooks
// (rounds reported with their cause, faults injected before calls). They
// wait on what the Elector reports, never on fixed sleeps; waits that
// depend on a lease expiring use short expiry windows.

var silent = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitLimit bounds every wait for something that must happen.
const waitLimit = 30 * time.Second

func electorCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newTestElection(t testing.TB, db *gorm.DB, ns string, expire time.Duration, opts ...Option) *Election {
	t.Helper()
	opts = append([]Option{WithNamespace(ns), WithExpire(expire), WithLogger(silent)}, opts...)
	e, err := New(db, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// stream is an append-only log that tests wait on.
type stream[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{}
}

func (s *stream[T]) add(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = append(s.items, v)
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

func (s *stream[T]) snapshot() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]T(nil), s.items...)
}

// wait returns the first item at index from or later that satisfies pred,
// and its index, failing t after waitLimit.
func (s *stream[T]) wait(t testing.TB, what string, from int, pred func(T) bool) (T, int) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		for i := from; i < len(s.items); i++ {
			if pred(s.items[i]) {
				v := s.items[i]
				s.mu.Unlock()
				return v, i
			}
		}
		from = max(from, len(s.items))
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			var zero T
			t.Fatalf("timed out waiting for %s", what)
			return zero, -1
		}
	}
}

func (s *stream[T]) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// seq orders events across Electors of one test.
type seq struct{ n atomic.Int64 }

func (s *seq) next() int64 { return s.n.Add(1) }

// event is one callback call.
type event struct {
	kind     string // started, stopped, work-done, new-leader
	lease    Lease
	seq      int64
	isLeader bool // the Elector's IsLeader when the callback ran
}

// recorder records an Elector's callbacks and rounds.
type recorder struct {
	t      testing.TB
	el     *Elector
	seq    *seq
	events stream[event]
	rounds stream[roundReport]
	// onStopped, when set, runs inside OnStoppedLeading.
	onStopped func(Lease)
	// tee, when set, gets every event too.
	tee func(event)
}

// newRecordedElector makes an Elector of e whose callbacks and rounds go to
// a recorder.
func newRecordedElector(t testing.TB, e *Election, s *seq, cfg ElectorConfig) *recorder {
	t.Helper()
	r := &recorder{t: t, seq: s}
	note := func(kind string, l Lease) {
		ev := event{kind: kind, lease: l, seq: s.next(), isLeader: r.el.IsLeader()}
		r.events.add(ev)
		if r.tee != nil {
			r.tee(ev)
		}
	}
	cfg.OnStartedLeading = func(ctx context.Context, l Lease) {
		note("started", l)
		<-ctx.Done()
		note("work-done", l)
	}
	cfg.OnStoppedLeading = func(l Lease) {
		if r.onStopped != nil {
			r.onStopped(l)
		}
		note("stopped", l)
	}
	cfg.OnNewLeader = func(l Lease) { note("new-leader", l) }
	el, err := e.NewElector(uuid.New(), cfg)
	if err != nil {
		t.Fatalf("NewElector: %v", err)
	}
	el.hooks.round = func(rr roundReport) { r.rounds.add(rr) }
	r.el = el
	return r
}

func (r *recorder) waitEvent(what string, from int, pred func(event) bool) (event, int) {
	r.t.Helper()
	return r.events.wait(r.t, what, from, pred)
}

// wokenSuccessor waits for b to lead, and checks that it won in a round a
// wake-up started and in the term after prev's.
func wokenSuccessor(t *testing.T, b *recorder, prev event) event {
	t.Helper()
	stB, _ := b.waitLeading(0)
	won, _ := b.waitRound("B's winning round", 0, func(rr roundReport) bool { return rr.lease.HeldBy(b.el.ID()) })
	if !wokenInProcess(t, b.el, won.cause) {
		t.Errorf("B won in a %s round, want a wake-up", won.cause)
	}
	if stB.lease.Term != prev.lease.Term+1 {
		t.Errorf("B's term %d, want %d", stB.lease.Term, prev.lease.Term+1)
	}
	return stB
}

// wokenInProcess reports whether a round of el's has the cause of a
// vacate's wake-up in this process: a local one or, where el's pool
// listens for handoffs between processes, the notification, which that
// listener hears too. It may come first: PostgreSQL's VacateNotify wakes
// this process only after its commit, SQLite writes its line after the
// commit, and the listener's echo of an earlier handoff can start a round
// that then waits for the vacate and wins. Without a listener (behind a
// transaction pooler, say) only the local wake-up counts.
func wokenInProcess(t *testing.T, el *Elector, cause roundCause) bool {
	t.Helper()
	return cause == causeWakeLocal || (cause == causeWakeNotify && hubOf(t, el).Listening() != nil)
}

// waitLeading waits for an OnStartedLeading at index from or later.
func (r *recorder) waitLeading(from int) (event, int) {
	r.t.Helper()
	return r.waitEvent("OnStartedLeading", from, func(e event) bool { return e.kind == "started" })
}

func (r *recorder) waitRound(what string, from int, pred func(roundReport) bool) (roundReport, int) {
	r.t.Helper()
	return r.rounds.wait(r.t, what, from, pred)
}

// run is an Elector's Run in a goroutine.
type run struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startRun(t testing.TB, el *Elector) *run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and returns its result.
func (r *run) stop(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(waitLimit):
			r.err = errors.New("Run did not return")
		}
	})
	return r.err
}

func mustStop(t testing.TB, r *run) {
	t.Helper()
	if err := r.stop(t); err != nil {
		t.Errorf("Run returned %v, want nil", err)
	}
}

// leaseLiveByDBClock reports whether ns's lease is still live by the
// database clock, read on db.
func leaseLiveByDBClock(t testing.TB, db *gorm.DB, ns string) (live bool, expires, now time.Time) {
	t.Helper()
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	var (
		exp, dbNow, acquired dialect.Time
		leader               sql.NullString
		term                 sql.NullInt64
	)
	q := d.Statements().SelectLeader[dialect.NoLock]
	if err := testdb.Raw(t, db).QueryRow(q, ns).Scan(&dbNow, &leader, &term, &exp, &acquired); err != nil {
		t.Errorf("reading the lease: %v", err)
		return false, time.Time{}, time.Time{}
	}
	return exp.Valid && exp.Time.After(dbNow.Time), exp.Time, dbNow.Time
}

// dbClock relates the local clock to the database's, read on a direct
// connection: the database clock read between local times t0 and t1 is
// taken to be that of their midpoint, give or take half the round trip.
// Both clocks are on this host and run at the same rate.
type dbClock struct {
	local, db time.Time
	slack     time.Duration
}

func readDBClock(t testing.TB, db *gorm.DB) dbClock {
	t.Helper()
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.Raw(t, db)
	var best dbClock
	for i := 0; i < 5; i++ {
		var now dialect.Time
		t0 := time.Now()
		if err := pool.QueryRow(d.Statements().Clock).Scan(&now); err != nil {
			t.Fatalf("reading the database clock: %v", err)
		}
		t1 := time.Now()
		c := dbClock{local: t0.Add(t1.Sub(t0) / 2), db: now.Time, slack: t1.Sub(t0)/2 + time.Millisecond}
		if i == 0 || c.slack < best.slack {
			best = c
		}
	}
	return best
}

// latest returns the latest database time that local time could be.
func (c dbClock) latest(local time.Time) time.Time {
	return c.db.Add(local.Sub(c.local) + c.slack)
}

// stepDown is what OnStoppedLeading saw.
type stepDown struct {
	at       time.Time // local time, after leadership ended
	lease    Lease
	isLeader bool
}

// recordStepDowns sends what r's OnStoppedLeading sees to the returned
// channel.
func recordStepDowns(r *recorder) <-chan stepDown {
	ch := make(chan stepDown, 16)
	r.onStopped = func(l Lease) {
		ch <- stepDown{at: time.Now(), lease: l, isLeader: r.el.IsLeader()}
	}
	return ch
}

// checkStepDownInTime checks that a leader stopped (at sd.at or before, by
// the local clock) before its lease expired by the database clock: both
// the expiry of the last renewal it knew of and the lease_expires_at read
// on a direct connection.
func checkStepDownInTime(t testing.TB, clock dbClock, sd stepDown, direct *gorm.DB, ns string) {
	t.Helper()
	if sd.isLeader {
		t.Error("IsLeader true in OnStoppedLeading")
	}
	stopped := clock.latest(sd.at)
	_, rowExpires, _ := leaseLiveByDBClock(t, direct, ns)
	if rowExpires.Before(sd.lease.ExpiresAt) {
		t.Errorf("the leader row expires at %v, before the lease the Elector held (%v)", rowExpires, sd.lease.ExpiresAt)
	}
	if !stopped.Before(sd.lease.ExpiresAt) {
		t.Errorf("stepped down at database time %v or before, not before the lease expired at %v", stopped, sd.lease.ExpiresAt)
	}
	t.Logf("stepped down at least %v before the lease expired by the database clock (clock reading ±%v)",
		sd.lease.ExpiresAt.Sub(stopped), clock.slack)
}

// ignoreDBGoroutines are goroutines the database drivers keep for each open
// connection or pool; they end when the pool is closed.
var ignoreDBGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
	goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	goleak.IgnoreTopFunction("database/sql.(*DB).connectionCleaner"),
}

func TestNewElectorValidation(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	e := newTestElection(t, db, "validation", 3*time.Second)
	id := uuid.New()

	el, err := e.NewElector(id, ElectorConfig{})
	if err != nil {
		t.Fatalf("NewElector with defaults: %v", err)
	}
	want := ElectorConfig{Interval: time.Second, SafetyMargin: 600 * time.Millisecond, ShutdownTimeout: DefaultShutdownTimeout}
	if got := el.Config(); got.Interval != want.Interval || got.SafetyMargin != want.SafetyMargin || got.ShutdownTimeout != want.ShutdownTimeout {
		t.Errorf("defaults: got %+v, want %+v", got, want)
	}
	if el.ID() != id {
		t.Errorf("ID() = %v, want %v", el.ID(), id)
	}
	if el.IsLeader() || !el.Observed().Vacant() {
		t.Errorf("a new Elector leads (%v) or saw a lease (%+v)", el.IsLeader(), el.Observed())
	}

	if _, err := e.NewElector(uuid.Nil, ElectorConfig{}); !errors.Is(err, ErrInvalidCandidate) {
		t.Errorf("NewElector(uuid.Nil): %v, want ErrInvalidCandidate", err)
	}
	bad := []struct {
		name string
		cfg  ElectorConfig
		rule string // a word the message must contain, naming the rule
	}{
		{"negative interval", ElectorConfig{Interval: -time.Second}, "Interval"},
		{"interval over half the window", ElectorConfig{Interval: 1600 * time.Millisecond}, "half"},
		{"negative margin", ElectorConfig{SafetyMargin: -time.Second}, "SafetyMargin"},
		{"margin leaves no room for a renewal", ElectorConfig{Interval: time.Second, SafetyMargin: 2 * time.Second}, "SafetyMargin"},
		{"negative shutdown timeout", ElectorConfig{ShutdownTimeout: -time.Second}, "ShutdownTimeout"},
	}
	for _, c := range bad {
		_, err := e.NewElector(id, c.cfg)
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: NewElector returned %v, want ErrInvalidOption", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.rule) {
			t.Errorf("%s: message %q does not name the rule (%q)", c.name, err, c.rule)
		}
	}
	// The largest settings that fit are accepted.
	if _, err := e.NewElector(id, ElectorConfig{Interval: 1500 * time.Millisecond, SafetyMargin: 1499 * time.Millisecond}); err != nil {
		t.Errorf("Interval = expire/2 with a margin just under the rest: %v", err)
	}

	//lint:ignore SA1012 a nil context is the case under test
	if err := el.Run(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Run(nil): %v, want ErrInvalidOption", err)
	}
}

// TestElectorLifecycle: an Elector alone registers, leads, reports the
// lease, and on cancellation stops leading before it unregisters, vacating
// the seat; Run returns nil, leaves no goroutine behind and cannot run
// twice.
func TestElectorLifecycle(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := newTestElection(t, db, ns, 3*time.Second)
			// Take the snapshot with the pool's goroutines running.
			if _, err := e.Leader(electorCtx(t)); err != nil {
				t.Fatal(err)
			}
			baseline := goleak.IgnoreCurrent()

			r := newRecordedElector(t, e, &seq{}, ElectorConfig{ShutdownTimeout: 2 * time.Second})
			run := startRun(t, r.el)
			nl, _ := r.waitEvent("OnNewLeader", 0, func(ev event) bool { return ev.kind == "new-leader" })
			st, _ := r.waitLeading(0)
			if nl.seq > st.seq || !nl.lease.HeldBy(r.el.ID()) {
				t.Errorf("OnNewLeader(%+v) should name the Elector before OnStartedLeading", nl.lease)
			}
			if !st.lease.HeldBy(r.el.ID()) || st.lease.Term < 1 || st.lease.Namespace != ns {
				t.Errorf("OnStartedLeading got %+v", st.lease)
			}
			if !st.isLeader || !r.el.IsLeader() {
				t.Errorf("IsLeader false while leading")
			}
			if got, ok := r.el.Lease(); !ok || got.Term != st.lease.Term || !got.HeldBy(r.el.ID()) {
				t.Errorf("Lease() = %+v, %v, want the lease of term %d", got, ok, st.lease.Term)
			}
			if got := r.el.Observed(); got.Term != st.lease.Term || !got.HeldBy(r.el.ID()) {
				t.Errorf("Observed() = %+v, want the lease of term %d", got, st.lease.Term)
			}
			ids, err := e.ListCandidates(electorCtx(t))
			if err != nil || len(ids) != 1 || ids[0] != r.el.ID() {
				t.Errorf("ListCandidates = %v, %v; want the Elector", ids, err)
			}
			if err := r.el.Run(electorCtx(t)); !errors.Is(err, ErrElectorStarted) {
				t.Errorf("second Run: %v, want ErrElectorStarted", err)
			}

			mustStop(t, run)
			evs := r.events.snapshot()
			var kinds []string
			for _, ev := range evs {
				kinds = append(kinds, ev.kind)
			}
			if got := strings.Join(kinds, " "); got != "new-leader started work-done stopped" && got != "new-leader started stopped work-done" {
				t.Errorf("callbacks: %s", got)
			}
			for _, ev := range evs {
				if ev.kind == "stopped" && ev.isLeader {
					t.Errorf("IsLeader true in OnStoppedLeading")
				}
			}
			if r.el.IsLeader() {
				t.Errorf("IsLeader true after Run returned")
			}
			l, err := e.Leader(electorCtx(t))
			if err != nil || !l.Vacant() {
				t.Errorf("seat after Run returned: %+v, %v; want vacant", l, err)
			}
			ids, err = e.ListCandidates(electorCtx(t))
			if err != nil || len(ids) != 0 {
				t.Errorf("candidates after Run returned: %v, %v; want none", ids, err)
			}
			goleak.VerifyNone(t, append([]goleak.Option{baseline}, ignoreDBGoroutines...)...)
		})
	}
}

// TestElectorHandoff: when the leader's Run ends, a candidate in the same
// Election is woken by the vacating transaction and wins at once, in the
// next term, while the old lease would still have been live by the
// database clock. The interval is long, so only a wake-up explains it.
func TestElectorHandoff(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := newTestElection(t, db, ns, 10*time.Second)
			s := &seq{}
			cfg := ElectorConfig{Interval: 3 * time.Second}
			a := newRecordedElector(t, e, s, cfg)
			b := newRecordedElector(t, e, s, cfg)
			runA := startRun(t, a.el)
			stA, _ := a.waitLeading(0)
			runB := startRun(t, b.el)
			// B's first round sees A leading.
			b.waitRound("B's first round", 0, func(rr roundReport) bool {
				return rr.cause == causeStart && rr.err == nil && rr.lease.HeldBy(a.el.ID())
			})
			if b.el.IsLeader() {
				t.Fatal("B leads while A does")
			}
			lastA := a.el.Observed()
			mustStop(t, runA)
			stopA, _ := a.waitEvent("A's OnStoppedLeading", 0, func(ev event) bool { return ev.kind == "stopped" })

			stB := wokenSuccessor(t, b, stA)
			if !stB.lease.AcquiredAt.Before(lastA.ExpiresAt) {
				t.Errorf("B acquired at %v, not before A's lease would have expired (%v)", stB.lease.AcquiredAt, lastA.ExpiresAt)
			}
			if stopA.seq > stB.seq {
				t.Errorf("A's OnStoppedLeading came after B's OnStartedLeading")
			}
			nl, _ := b.waitEvent("B's OnNewLeader naming itself", 0, func(ev event) bool {
				return ev.kind == "new-leader" && ev.lease.HeldBy(b.el.ID())
			})
			if first := b.events.snapshot()[0]; first.kind != "new-leader" || !first.lease.HeldBy(a.el.ID()) {
				t.Errorf("B's first OnNewLeader: %+v, want A", first)
			}
			if nl.seq > stB.seq {
				t.Errorf("B's OnNewLeader after its OnStartedLeading")
			}
			mustStop(t, runB)
		})
	}
}

// TestElectorResign: a leader hands over without stopping. It stops leading
// before Resign returns, the other candidate is woken and wins, the
// resigner stays a candidate and skips one tick; alone, it wins the next
// term after that tick.
func TestElectorResign(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			t.Run("handover", func(t *testing.T) {
				ns := testdb.Namespace(t)
				e := newTestElection(t, db, ns, 10*time.Second)
				s := &seq{}
				cfg := ElectorConfig{Interval: 3 * time.Second}
				a := newRecordedElector(t, e, s, cfg)
				b := newRecordedElector(t, e, s, cfg)
				startRun(t, a.el)
				stA, iA := a.waitLeading(0)
				startRun(t, b.el)
				b.waitRound("B's first round", 0, func(rr roundReport) bool { return rr.err == nil })

				if err := a.el.Resign(electorCtx(t)); err != nil {
					t.Fatalf("Resign: %v", err)
				}
				if a.el.IsLeader() {
					t.Error("IsLeader true after Resign returned")
				}
				a.waitEvent("A's work to end", 0, func(ev event) bool { return ev.kind == "work-done" })
				a.waitEvent("A's OnStoppedLeading", 0, func(ev event) bool { return ev.kind == "stopped" })
				stB := wokenSuccessor(t, b, stA)
				ids, err := e.ListCandidates(electorCtx(t))
				if err != nil || len(ids) != 2 {
					t.Errorf("candidates after Resign: %v, %v; want both", ids, err)
				}
				// A, woken in turn, takes the next term. Wake-ups are hints
				// that may come twice (in process and through the
				// notification): a late one of A's handoff must not end B's
				// sit-out (the seat is still in B's term), or B would take
				// the seat back first.
				fromB := b.events.len()
				if err := b.el.Resign(electorCtx(t)); err != nil {
					t.Fatalf("B's Resign: %v", err)
				}
				stB2, _ := b.events.wait(t, "B to see A lead, or to lead", fromB, func(ev event) bool {
					return ev.kind == "started" || ev.kind == "new-leader" && ev.lease.HeldBy(a.el.ID())
				})
				if stB2.kind == "started" {
					t.Fatalf("B took the seat back in term %d after its Resign", stB2.lease.Term)
				}
				stA2, _ := a.waitLeading(iA + 1)
				if stA2.lease.Term != stB.lease.Term+1 {
					t.Errorf("A's second term %d, want %d", stA2.lease.Term, stB.lease.Term+1)
				}
			})
			t.Run("alone", func(t *testing.T) {
				ns := testdb.Namespace(t)
				e := newTestElection(t, db, ns, time.Second)
				a := newRecordedElector(t, e, &seq{}, ElectorConfig{Interval: 200 * time.Millisecond})
				startRun(t, a.el)
				st, iSt := a.waitLeading(0)
				if err := a.el.Resign(electorCtx(t)); err != nil {
					t.Fatalf("Resign: %v", err)
				}
				if a.el.IsLeader() {
					t.Error("IsLeader true after Resign returned")
				}
				// Rounds before Resign was carried out are all reported by now.
				from := a.rounds.len()
				next, i := a.waitRound("the round after Resign", from, func(roundReport) bool { return true })
				if next.cause != causeSitOut || next.lease.HeldBy(a.el.ID()) || next.leading {
					t.Errorf("first round after Resign: %s round, lease %+v, err %v; want an observation, not an election",
						next.cause, next.lease, next.err)
				}
				won, _ := a.waitRound("A's next term", i+1, func(rr roundReport) bool { return rr.lease.HeldBy(a.el.ID()) })
				if won.lease.Term != st.lease.Term+1 {
					t.Errorf("A won term %d after resigning term %d, want %d", won.lease.Term, st.lease.Term, st.lease.Term+1)
				}
				a.waitLeading(iSt + 1)
			})
		})
	}
	t.Run("without Run", func(t *testing.T) {
		db := testdb.Open(t, testdb.Target{Name: "sqlite"})
		e := newTestElection(t, db, "resign", time.Second)
		el, err := e.NewElector(uuid.New(), ElectorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Elect(electorCtx(t), el.ID()); err != nil {
			t.Fatal(err)
		}
		if err := el.Resign(electorCtx(t)); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if l, err := e.Leader(electorCtx(t)); err != nil || !l.Vacant() {
			t.Errorf("seat after Resign: %+v, %v; want vacant", l, err)
		}
	})
}

// logRecorder keeps the messages logged at Warn and above.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) count(substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// TestElectorRetries: failing rounds are logged and retried with backoff,
// never ending Run, and the Elector leads once calls succeed again.
func TestElectorRetries(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	logs := &logRecorder{}
	e := newTestElection(t, db, "retries", time.Second, WithLogger(slog.New(logs)))
	r := newRecordedElector(t, e, &seq{}, ElectorConfig{Interval: 200 * time.Millisecond})
	var calls atomic.Int32
	injected := errors.New("injected failure")
	r.el.hooks.call = func(context.Context) error {
		if calls.Add(1) <= 4 {
			return injected
		}
		return nil
	}
	startRun(t, r.el)
	st, _ := r.waitLeading(0)
	// OnStartedLeading can run before the winning round is reported.
	r.waitRound("the first successful round", 0, func(rr roundReport) bool { return rr.err == nil })
	rounds := r.rounds.snapshot()
	if len(rounds) < 5 {
		t.Fatalf("%d rounds, want 4 failures and a success", len(rounds))
	}
	for i, rr := range rounds[:4] {
		want := causeRetry
		if i == 0 {
			want = causeStart
		}
		if !errors.Is(rr.err, injected) || rr.cause != want {
			t.Errorf("round %d: cause %s, err %v; want %s with the injected error", i, rr.cause, rr.err, want)
		}
	}
	if !st.lease.HeldBy(r.el.ID()) {
		t.Errorf("lease %+v", st.lease)
	}
	if n := logs.count("round failed"); n != 4 {
		t.Errorf("%d failures logged, want 4", n)
	}
	// The backoff grows, and stays within the interval.
	for f := 1; f < 10; f++ {
		if w := r.el.t.retryWait(f); w <= 0 || w > r.el.cfg.Interval*6/5 {
			t.Errorf("retryWait(%d) = %v", f, w)
		}
	}
	if r.el.t.retryWait(1) >= r.el.t.retryWait(4) {
		t.Errorf("retryWait does not grow: %v then %v", r.el.t.retryWait(1), r.el.t.retryWait(4))
	}
}

// TestElectorNotMigrated: without the tables, Run returns ErrNotMigrated
// instead of retrying forever.
func TestElectorNotMigrated(t *testing.T) {
	db := testdb.OpenDSN(t, testdb.Fresh(t, testdb.Target{Name: "sqlite"}))
	e := newTestElection(t, db, "unmigrated", time.Second)
	el, err := e.NewElector(uuid.New(), ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := el.Run(electorCtx(t)); !errors.Is(err, ErrNotMigrated) {
		t.Errorf("Run: %v, want ErrNotMigrated", err)
	}
}

// TestElectorStepsDownWhenCallsHang: calls that never return (a hung
// connection) do not keep a leader leading: the trust window's timer ends
// leadership while the lease is still live by the database clock, and the
// Elector leads again once calls go through.
func TestElectorStepsDownWhenCallsHang(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := newTestElection(t, db, ns, 2*time.Second)
			r := newRecordedElector(t, e, &seq{}, ElectorConfig{Interval: 300 * time.Millisecond, SafetyMargin: 800 * time.Millisecond})
			var hang atomic.Bool
			r.el.hooks.call = func(ctx context.Context) error {
				if hang.Load() {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}
			stops := recordStepDowns(r)
			startRun(t, r.el)
			st, iSt := r.waitLeading(0)
			clock := readDBClock(t, db)
			hang.Store(true)
			r.waitEvent("the leader's work to end", 0, func(ev event) bool { return ev.kind == "work-done" })
			checkStepDownInTime(t, clock, <-stops, db, ns)
			hang.Store(false)
			st2, _ := r.waitLeading(iSt + 1)
			if st2.lease.Term < st.lease.Term {
				t.Errorf("term went back: %d then %d", st.lease.Term, st2.lease.Term)
			}
		})
	}
}

// TestResignIgnoresWakeInVain: a wake-up during the tick a Resign skips
// ends the skip only when another candidate has held the seat since. One
// that finds the seat as the Resign left it (an echo of an earlier
// handoff, or a MySQL listener interrupted by another process, which
// wakes every namespace of its pool) leaves the next round an
// observation; one after another candidate's term makes the Elector take
// the seat at once.
func TestResignIgnoresWakeInVain(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			a := newRecordedElector(t, newTestElection(t, db, ns, 10*time.Second), &seq{}, ElectorConfig{Interval: 3 * time.Second})
			startRun(t, a.el)
			st, _ := a.waitLeading(0)
			if err := a.el.Resign(electorCtx(t)); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			from := a.rounds.len()
			a.el.signal(signal{kind: sigWakeAny, src: handoff.Notify})
			next, _ := a.waitRound("the round after the wake-up", from, func(roundReport) bool { return true })
			if next.cause != causeSitOut || next.lease.HeldBy(a.el.ID()) {
				t.Fatalf("after a wake-up in vain: a %s round, lease %+v; want the skipped tick's observation", next.cause, next.lease)
			}

			// Another candidate leads and gives the seat up while A skips
			// a tick again: that wake-up ends the skip.
			won, _ := a.waitRound("A's next term", from, func(rr roundReport) bool { return rr.lease.HeldBy(a.el.ID()) })
			if won.lease.Term != st.lease.Term+1 {
				t.Fatalf("A's next term %d, want %d", won.lease.Term, st.lease.Term+1)
			}
			handBackByAnother(t, a, db, ns)
		})
	}
}

// handBackByAnother checks that a genuine hand-back ends a's sit-out after
// its own give-up: a, leading, resigns; another candidate takes the seat
// and resigns in turn; a must take the seat from that handoff's wake-up,
// not from its tick.
func handBackByAnother(t *testing.T, a *recorder, db *gorm.DB, ns string) {
	t.Helper()
	if err := a.el.Resign(electorCtx(t)); err != nil {
		t.Fatalf("A's Resign before the hand-back: %v", err)
	}
	other := newTestElection(t, db, ns, 10*time.Second)
	b := uuid.New()
	if l, err := other.Elect(electorCtx(t), b); err != nil || !l.HeldBy(b) {
		t.Fatalf("B's Elect: %+v, %v", l, err)
	}
	from := a.rounds.len()
	if err := other.Resign(electorCtx(t), b); err != nil {
		t.Fatalf("B's Resign: %v", err)
	}
	taken, _ := a.waitRound("A's round after B's Resign", from, func(rr roundReport) bool { return rr.lease.HeldBy(a.el.ID()) })
	if taken.cause != causeWakeLocal && taken.cause != causeWakeNotify {
		t.Errorf("A took the seat in a %s round, want a wake-up's", taken.cause)
	}
}
