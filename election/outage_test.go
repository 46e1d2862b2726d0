package election_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/faultproxy"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// Bounds of the outage tests. callDeadline is each call's context deadline;
// a call still running outageGrace after it has hung, which is what the
// tests look for. The grace is generous because the point is that calls
// end, not how fast.
const (
	callDeadline = time.Second
	outageGrace  = 15 * time.Second
)

// outageLeakCheck fails t if goroutines started during the test are still
// running after its cleanups (proxies and pools are closed by then).
func outageLeakCheck(t *testing.T) {
	t.Helper()
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, current) })
}

// outageCall is one call an application makes while the database may be
// away.
type outageCall struct {
	name string
	run  func(ctx context.Context) error
}

// outageCalls are every protocol call for candidate id holding lease, and
// Guard in a transaction of the caller's.
func outageCalls(db *gorm.DB, e *election.Election, id uuid.UUID, lease election.Lease) []outageCall {
	return []outageCall{
		{"RegisterCandidate", func(ctx context.Context) error { return e.RegisterCandidate(ctx, id) }},
		{"Heartbeat", func(ctx context.Context) error { return e.Heartbeat(ctx, id) }},
		{"Elect", func(ctx context.Context) error { _, err := e.Elect(ctx, id); return err }},
		{"IsLeader", func(ctx context.Context) error { _, err := e.IsLeader(ctx, id); return err }},
		{"Leader", func(ctx context.Context) error { _, err := e.Leader(ctx); return err }},
		{"ListCandidates", func(ctx context.Context) error { _, err := e.ListCandidates(ctx); return err }},
		{"Guard", func(ctx context.Context) error { return e.Guard(ctx, lease) }},
		{"Prune", func(ctx context.Context) error { _, err := e.Prune(ctx); return err }},
		{"Guard in a transaction", func(ctx context.Context) error {
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return e.Guard(ctx, lease, election.WithTx(tx))
			})
		}},
		// Last, so that the calls above still find the lease held.
		{"Resign", func(ctx context.Context) error { return e.Resign(ctx, id) }},
		{"UnregisterCandidate", func(ctx context.Context) error { return e.UnregisterCandidate(ctx, id) }},
	}
}

// callBounded runs c with a context that ends after callDeadline and
// returns its error and how long it took. It fails t if c panics or is still
// running outageGrace after its deadline.
func callBounded(t *testing.T, c outageCall) (time.Duration, error) {
	t.Helper()
	r := callAllBounded(t, []outageCall{c})[0]
	return r.took, r.err
}

// boundedResult is how one bounded call ended.
type boundedResult struct {
	took time.Duration
	err  error
}

// callAllBounded runs the calls at once, each as callBounded does, and
// returns their results in order.
func callAllBounded(t *testing.T, calls []outageCall) []boundedResult {
	t.Helper()
	type done struct {
		i     int
		r     boundedResult
		panic any
	}
	ch := make(chan done, len(calls))
	for i, c := range calls {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
			defer cancel()
			start := time.Now()
			defer func() {
				if p := recover(); p != nil {
					ch <- done{i: i, panic: p}
				}
			}()
			err := c.run(ctx)
			ch <- done{i: i, r: boundedResult{took: time.Since(start), err: err}}
		}()
	}
	out := make([]boundedResult, len(calls))
	timeout := time.After(callDeadline + outageGrace)
	for range calls {
		select {
		case d := <-ch:
			if d.panic != nil {
				t.Fatalf("%s panicked: %v", calls[d.i].name, d.panic)
			}
			out[d.i] = d.r
		case <-timeout:
			t.Fatalf("a call was still running %v after its deadline", outageGrace)
		}
	}
	return out
}

// outageProxy starts a proxy to tg's server, closed when the test ends.
func outageProxy(t *testing.T, tg testdb.Target) (*faultproxy.Proxy, string) {
	t.Helper()
	p, dsn, err := faultproxy.ForDSN(tg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, dsn
}

// TestOutageDownAtStart: with the database away, Open fails with
// ErrUnreachable naming the address it tried, and an Election made while it
// was up gets clear errors from every call, then works once it is back.
func TestOutageDownAtStart(t *testing.T) {
	outageLeakCheck(t)
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			p, dsn := outageProxy(t, tg)
			p.Cut()
			start := time.Now()
			db, err := session.Open(dsn)
			if err == nil {
				testdb.Close(db)
				t.Fatal("Open succeeded with the database away")
			}
			if !errors.Is(err, session.ErrUnreachable) {
				t.Fatalf("Open: %v, want ErrUnreachable", err)
			}
			if !strings.Contains(err.Error(), p.Addr()) {
				t.Errorf("Open's error does not name the address %s: %v", p.Addr(), err)
			}
			t.Logf("Open with the database away: %v after %v", err, time.Since(start).Round(time.Millisecond))

			p.Resume()
			db = testdb.OpenDSN(t, dsn)
			e := mustElection(t, db, testdb.Namespace(t), election.WithExpire(time.Minute))
			eEl := mustElection(t, db, e.Namespace()+".elector", election.WithExpire(900*time.Millisecond))
			p.Cut()
			// New checks the database's settings, so it needs the database.
			if _, err := election.New(db, election.WithLogger(quiet)); err == nil {
				t.Error("New succeeded with the database away")
			} else {
				t.Logf("New: %v", err)
			}
			id := uuid.New()
			lease := election.Lease{Namespace: e.Namespace(), Leader: id, Term: 1}
			for _, c := range outageCalls(db, e, id, lease) {
				took, err := callBounded(t, c)
				if err == nil {
					t.Errorf("%s succeeded with the database away", c.name)
					continue
				}
				t.Logf("%s: %v (%v)", c.name, err, took.Round(time.Millisecond))
			}
			// An Elector started while the database is away keeps trying,
			// and leads once it is back.
			el, events := outageElector(t, eEl)
			run := startOutageRun(t, el)
			time.Sleep(2 * callDeadline) // a few failed rounds
			if el.IsLeader() {
				t.Fatal("an Elector leads with the database away")
			}
			p.Resume()
			waitOutageEvent(t, events, "started")
			if err := run.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			outageRecover(t, db, e, id)
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		// The directory of the file does not exist: nothing to open.
		_, err := session.Open("sqlite:" + filepath.Join(t.TempDir(), "missing", "app.db"))
		if !errors.Is(err, session.ErrUnreachable) {
			t.Fatalf("Open of a file in a missing directory: %v, want ErrUnreachable", err)
		}
	})
}

// outageRecover checks that, with the database back, every call works
// again: the first attempt may meet a connection that died in the outage,
// but a few attempts later each call succeeds.
func outageRecover(t *testing.T, db *gorm.DB, e *election.Election, id uuid.UUID) {
	t.Helper()
	var lease election.Lease
	elect := outageCall{"Elect", func(ctx context.Context) error {
		var err error
		lease, err = e.Elect(ctx, id)
		return err
	}}
	failures := 0
	for attempt := 0; ; attempt++ {
		_, err := callBounded(t, elect)
		if err == nil {
			break
		}
		failures++
		if attempt == 20 {
			t.Fatalf("Elect still fails after the database came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !lease.HeldBy(id) {
		t.Fatalf("after the outage, Elect gave %+v", lease)
	}
	for _, c := range outageCalls(db, e, id, lease) {
		for attempt := 0; ; attempt++ {
			_, err := callBounded(t, c)
			if err == nil {
				break
			}
			failures++
			if attempt == 20 {
				t.Fatalf("%s still fails after the database came back: %v", c.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("after the database came back: %d failed attempts before every call worked", failures)
}

// TestOutageMidRun: the database goes away while an Elector leads and
// calls are made, by resetting every connection (cut) or by never
// answering (stall). Every call returns an error, a stalled one by its
// context's deadline; nothing panics; the Elector steps down and Run goes
// on; once the database is back, calls work and the Elector leads again.
func TestOutageMidRun(t *testing.T) {
	outageLeakCheck(t)
	for _, tg := range testdb.Servers(t) {
		for _, mode := range []string{"cut", "stall"} {
			t.Run(tg.Name+"/"+mode, func(t *testing.T) {
				p, dsn := outageProxy(t, tg)
				db := testdb.OpenDSN(t, dsn)
				ctx := testCtx(t)
				if err := migrate.Up(ctx, db); err != nil {
					t.Fatal(err)
				}
				ns := testdb.Namespace(t)
				e := mustElection(t, db, ns, election.WithExpire(900*time.Millisecond))
				id := uuid.New()
				lease, err := e.Elect(ctx, id)
				if err != nil || !lease.HeldBy(id) {
					t.Fatalf("Elect: %+v, %v", lease, err)
				}

				// An Elector of its own, in another namespace of the same
				// pool, rides through the outage.
				el, events := outageElector(t, mustElection(t, db, ns+".elector", election.WithExpire(900*time.Millisecond)))
				run := startOutageRun(t, el)
				waitOutageEvent(t, events, "started")

				switch mode {
				case "cut":
					p.Cut()
				case "stall":
					p.SetDelay(time.Hour)
				}
				calls := outageCalls(db, e, id, lease)
				for i, r := range callAllBounded(t, calls) {
					c, took, err := calls[i], r.took, r.err
					if err == nil {
						t.Errorf("%s succeeded with the database away (%s)", c.name, mode)
						continue
					}
					if mode == "stall" && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("%s with the database stalled: %v, want context.DeadlineExceeded", c.name, err)
					}
					if !strings.HasPrefix(c.name, "Guard in") && !strings.Contains(err.Error(), c.name) {
						t.Errorf("%s: the error does not name the call: %v", c.name, err)
					}
					t.Logf("%s: %v (%v)", c.name, err, took.Round(time.Millisecond))
				}
				waitOutageEvent(t, events, "stopped")
				if el.IsLeader() {
					t.Fatal("the Elector still leads with the database away")
				}

				switch mode {
				case "cut":
					p.Resume()
				case "stall":
					// Connections stuck behind the delay are of no use; drop
					// them and let new ones through at full speed.
					p.Cut()
					p.SetDelay(0)
					p.Resume()
				}
				outageRecover(t, db, e, id)
				waitOutageEvent(t, events, "started")
				if err := run.stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
			})
		}
	}
}

// TestOutageSQLiteFileGone: the SQLite file is moved away under a running
// application and back. While it is gone, a new connection finds an empty
// database and every call says ErrNotMigrated; once it is back, calls work.
func TestOutageSQLiteFileGone(t *testing.T) {
	outageLeakCheck(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	db := testdb.OpenDSN(t, "sqlite:"+path)
	ctx := testCtx(t)
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	// Every call on a new connection, as after a restart of the pool.
	sqlDB := testdb.Raw(t, db)
	sqlDB.SetMaxIdleConns(0)
	e := mustElection(t, db, "outage", election.WithExpire(time.Minute))
	id := uuid.New()
	lease, err := e.Elect(ctx, id)
	if err != nil || !lease.HeldBy(id) {
		t.Fatalf("Elect: %+v, %v", lease, err)
	}
	aside := filepath.Join(dir, "aside")
	if err := os.Mkdir(aside, 0o700); err != nil {
		t.Fatal(err)
	}
	move := func(from, to string) {
		t.Helper()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Rename(from+suffix, to+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	move(path, filepath.Join(aside, "app.db"))
	for _, c := range outageCalls(db, e, id, lease) {
		_, err := callBounded(t, c)
		if !errors.Is(err, election.ErrNotMigrated) {
			t.Errorf("%s with the file gone: %v, want ErrNotMigrated", c.name, err)
		}
	}
	// Put it back in place of the empty file the calls created.
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(path + suffix)
	}
	move(filepath.Join(aside, "app.db"), path)
	outageRecover(t, db, e, id)
}

// outageElector returns an Elector whose leadership changes are sent on
// the returned channel as "started" and "stopped".
func outageElector(t *testing.T, e *election.Election) (*election.Elector, <-chan string) {
	t.Helper()
	events := make(chan string, 64)
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		OnStartedLeading: func(ctx context.Context, _ election.Lease) { events <- "started" },
		OnStoppedLeading: func(election.Lease) { events <- "stopped" },
		ShutdownTimeout:  2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return el, events
}

func waitOutageEvent(t *testing.T, events <-chan string, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-events:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("the Elector did not report %q", want)
		}
	}
}

// outageRun is an Elector's Run in a goroutine.
type outageRun struct {
	cancel context.CancelFunc
	done   chan error
}

func startOutageRun(t *testing.T, el *election.Elector) *outageRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &outageRun{cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.done <- fmt.Errorf("Run panicked: %v", p)
			}
		}()
		r.done <- el.Run(ctx)
	}()
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// stop ends Run and returns its error; later calls return nil.
func (r *outageRun) stop() error {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		return errors.New("Run did not return within 30s of its context ending")
	}
}
