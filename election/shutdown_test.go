package election_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// The leader's work must be over before anyone else can lead: Run and
// Resign vacate the seat only once OnStartedLeading has returned. These
// tests give the Elector a leader whose work ignores its cancelled context
// until the test lets it go, and record in an electiontest.Recorder the old
// leader's work, from the start of its term to the database clock read by
// the work as its last act, next to the successor's lease: the Checker
// reports an Overlap if the successor began before that work ended.

// stubbornWork is an OnStartedLeading whose first call goes on after its
// context ends, until release is closed. Later calls return when their
// context ends.
type stubbornWork struct {
	db        *gorm.DB
	calls     atomic.Int32
	started   chan election.Lease // the first call's lease
	cancelled chan struct{}       // closed when the first call saw its context end
	release   chan struct{}       // closed by the test: the first call may return
	ended     chan time.Time      // the database clock read by the first call as its last act
}

func newStubbornWork(db *gorm.DB) *stubbornWork {
	return &stubbornWork{
		db:        db,
		started:   make(chan election.Lease, 1),
		cancelled: make(chan struct{}),
		release:   make(chan struct{}),
		ended:     make(chan time.Time, 1),
	}
}

func (w *stubbornWork) run(ctx context.Context, l election.Lease) {
	if w.calls.Add(1) > 1 {
		<-ctx.Done()
		return
	}
	w.started <- l
	<-ctx.Done()
	close(w.cancelled)
	<-w.release
	w.ended <- readClock(w.db)
}

// readClock reads the database clock, or returns the zero time.
func readClock(db *gorm.DB) time.Time {
	d, err := dialect.For(db)
	if err != nil {
		return time.Time{}
	}
	var now dialect.Time
	if err := db.Raw(d.Statements().Clock).Row().Scan(&now); err != nil {
		return time.Time{}
	}
	return now.Time
}

// waitFor receives from ch, failing t after waitLimit.
func waitFor[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// startElector runs el until the test ends; stop cancels Run and returns
// its result.
func startElector(t *testing.T, el *election.Elector) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// successor is a plain Elector that reports the leases it leads with and
// the leaders it sees.
type successor struct {
	el      *election.Elector
	started chan election.Lease
	seen    chan election.Lease
}

func newSuccessor(t *testing.T, e *election.Election) *successor {
	t.Helper()
	s := &successor{started: make(chan election.Lease, 8), seen: make(chan election.Lease, 64)}
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		Interval: 300 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, l election.Lease) {
			s.started <- l
			<-ctx.Done()
		},
		OnNewLeader: func(l election.Lease) {
			select {
			case s.seen <- l:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.el = el
	return s
}

// waitSees waits until the successor has seen id lead.
func (s *successor) waitSees(t *testing.T, id uuid.UUID) {
	t.Helper()
	for {
		if l := waitFor(t, "the successor to see the leader", s.seen); l.HeldBy(id) {
			return
		}
	}
}

// workLease is the old leader's work as a lease: from the start of its
// term to the end of the work.
func workLease(l election.Lease, end time.Time) election.Lease {
	l.ExpiresAt = end
	return l
}

// TestElectorShutdownKeepsSeatWhileWorkRuns: when OnStartedLeading does not
// return within ShutdownTimeout, Run returns without vacating the seat and
// says so once in the log; the successor leads only after the old lease
// expired by itself, and after the old leader's work ended.
func TestElectorShutdownKeepsSeatWhileWorkRuns(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			logs := newLogTally()
			e := mustElection(t, db, ns, election.WithExpire(2*time.Second), election.WithLogger(logs.logger()))
			rec := electiontest.NewRecorder()
			ctx := testCtx(t)

			work := newStubbornWork(db)
			a, err := e.NewElector(uuid.New(), election.ElectorConfig{
				Interval:         300 * time.Millisecond,
				ShutdownTimeout:  100 * time.Millisecond,
				OnStartedLeading: work.run,
			})
			if err != nil {
				t.Fatal(err)
			}
			stopA := startElector(t, a)
			la := waitFor(t, "A to lead", work.started)
			b := newSuccessor(t, e)
			startElector(t, b.el)
			b.waitSees(t, a.ID())

			if err := stopA(); err != nil {
				t.Fatalf("A's Run: %v", err)
			}
			// Run has returned while A's work still runs (it waits for
			// release): the seat must still be A's, in the same term.
			select {
			case <-work.cancelled:
			default:
				t.Fatal("Run returned before the leader's context was cancelled")
			}
			lastA := a.Observed()
			rec.Observe("A", la)
			rec.Observe("A", lastA)
			seat, err := e.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rec.Observe("test", seat)
			if !seat.HeldBy(a.ID()) || seat.Term != la.Term {
				t.Errorf("after Run returned with the work running: seat %+v; want A's term %d kept", seat, la.Term)
			}
			n := 0
			for _, w := range logs.warns {
				if strings.Contains(w, "OnStartedLeading still running") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d log lines say the work still runs, want 1: %q", n, logs.warns)
			}
			// Resign after Run also waits for the work.
			rctx, rcancel := context.WithCancel(ctx)
			rcancel()
			if err := a.Resign(rctx); !errors.Is(err, context.Canceled) {
				t.Errorf("Resign after Run with the work running: %v, want context.Canceled", err)
			}
			if seat, err := e.Leader(ctx); err != nil || !seat.HeldBy(a.ID()) || seat.Term != la.Term {
				t.Errorf("after a Resign that timed out: seat %+v, %v; want A's term %d kept", seat, err, la.Term)
			}

			close(work.release)
			end := waitFor(t, "A's work to end", work.ended)
			if end.IsZero() {
				t.Fatal("the work could not read the database clock")
			}
			rec.Observe("A-work", workLease(la, end))

			lb := waitFor(t, "B to lead", b.started)
			rec.Observe("B", lb)
			if lb.Term != la.Term+1 {
				t.Errorf("B leads in term %d, want %d", lb.Term, la.Term+1)
			}
			if lb.AcquiredAt.Before(seat.ExpiresAt) {
				t.Errorf("B began at %v, before A's lease expired at %v", lb.AcquiredAt, seat.ExpiresAt)
			}
			if res := rec.Check(); res.Err() != nil {
				t.Fatal(res.Err())
			}
			t.Logf("A's work ended %v before its lease expired; B began %v after it",
				seat.ExpiresAt.Sub(end), lb.AcquiredAt.Sub(seat.ExpiresAt))
		})
	}
}

// TestElectorResignWaitsForWork: Resign stops leading at once but vacates
// only once OnStartedLeading has returned; the successor, woken by the
// vacancy, begins after the old leader's work ended.
func TestElectorResignWaitsForWork(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns, election.WithExpire(10*time.Second))
			rec := electiontest.NewRecorder()
			ctx := testCtx(t)

			work := newStubbornWork(db)
			a, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 3 * time.Second, OnStartedLeading: work.run})
			if err != nil {
				t.Fatal(err)
			}
			startElector(t, a)
			la := waitFor(t, "A to lead", work.started)
			b := newSuccessor(t, e)
			startElector(t, b.el)
			b.waitSees(t, a.ID())

			resigned := make(chan error, 1)
			go func() { resigned <- a.Resign(ctx) }()
			<-work.cancelled
			if a.IsLeader() {
				t.Error("IsLeader true after the leader's context was cancelled by Resign")
			}
			seat, err := e.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !seat.HeldBy(a.ID()) || seat.Term != la.Term {
				t.Errorf("while the work runs: seat %+v; want A's term %d kept", seat, la.Term)
			}
			select {
			case err := <-resigned:
				t.Errorf("Resign returned (%v) while the work still runs", err)
			default:
			}

			close(work.release)
			end := waitFor(t, "A's work to end", work.ended)
			if err := waitFor(t, "Resign to return", resigned); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			if end.IsZero() {
				t.Fatal("the work could not read the database clock")
			}
			rec.Observe("A-work", workLease(la, end))
			lb := waitFor(t, "B to lead", b.started)
			rec.Observe("B", lb)
			if lb.Term != la.Term+1 {
				t.Errorf("B leads in term %d, want %d", lb.Term, la.Term+1)
			}
			if !lb.AcquiredAt.Before(la.ExpiresAt) {
				t.Errorf("B began at %v, not before A's lease would have expired (%v): no handoff", lb.AcquiredAt, la.ExpiresAt)
			}
			if res := rec.Check(); res.Err() != nil {
				t.Fatal(res.Err())
			}
		})
	}
}

// TestElectorResignContextEnds: when Resign's context ends before
// OnStartedLeading returns, Resign returns the context's error and leaves
// the seat as it was.
func TestElectorResignContextEnds(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns, election.WithExpire(10*time.Second))
			ctx := testCtx(t)

			work := newStubbornWork(db)
			a, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 3 * time.Second, OnStartedLeading: work.run})
			if err != nil {
				t.Fatal(err)
			}
			startElector(t, a)
			la := waitFor(t, "A to lead", work.started)

			rctx, rcancel := context.WithCancel(ctx)
			resigned := make(chan error, 1)
			go func() { resigned <- a.Resign(rctx) }()
			<-work.cancelled
			rcancel()
			err = waitFor(t, "Resign to return", resigned)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Resign: %v, want context.Canceled", err)
			}
			if a.IsLeader() {
				t.Error("IsLeader true after Resign")
			}
			seat, err := e.Leader(ctx)
			if err != nil || !seat.HeldBy(a.ID()) || seat.Term != la.Term {
				t.Errorf("after Resign's context ended: seat %+v, %v; want A's term %d kept", seat, err, la.Term)
			}
			close(work.release)
			waitFor(t, "A's work to end", work.ended)
		})
	}
}

// TestElectorResignFromWork: Resign called by the leader's work with its
// own context returns at once, and the seat is vacated once the work has
// returned, not before.
func TestElectorResignFromWork(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns, election.WithExpire(10*time.Second))
			rec := electiontest.NewRecorder()
			ctx := testCtx(t)

			var a *election.Elector
			started := make(chan election.Lease, 1)
			resigned := make(chan error, 1)
			release := make(chan struct{})
			ended := make(chan time.Time, 1)
			var calls atomic.Int32
			a, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 3 * time.Second,
				OnStartedLeading: func(wctx context.Context, l election.Lease) {
					if calls.Add(1) > 1 {
						<-wctx.Done()
						return
					}
					started <- l
					resigned <- a.Resign(wctx)
					<-release
					ended <- readClock(db)
				}})
			if err != nil {
				t.Fatal(err)
			}
			b := newSuccessor(t, e)
			startElector(t, a)
			la := waitFor(t, "A to lead", started)
			startElector(t, b.el)
			b.waitSees(t, a.ID())

			if err := waitFor(t, "Resign to return", resigned); err != nil {
				t.Fatalf("Resign from the leader's work: %v", err)
			}
			if a.IsLeader() {
				t.Error("IsLeader true after Resign returned")
			}
			if seat, err := e.Leader(ctx); err != nil || !seat.HeldBy(a.ID()) || seat.Term != la.Term {
				t.Errorf("while the work runs: seat %+v, %v; want A's term %d kept", seat, err, la.Term)
			}
			close(release)
			end := waitFor(t, "A's work to end", ended)
			if end.IsZero() {
				t.Fatal("the work could not read the database clock")
			}
			rec.Observe("A-work", workLease(la, end))
			lb := waitFor(t, "B to lead", b.started)
			rec.Observe("B", lb)
			if !lb.AcquiredAt.Before(la.ExpiresAt) {
				t.Errorf("B began at %v, not before A's lease would have expired (%v): no handoff", lb.AcquiredAt, la.ExpiresAt)
			}
			if res := rec.Check(); res.Err() != nil {
				t.Fatal(res.Err())
			}
		})
	}
}
