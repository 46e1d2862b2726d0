package replicatest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// The environment internal/ci/pgreplica.sh prints.
const (
	envReplica = "SQLELECT_REPLICA_DSN" // multi-host, target_session_attrs=read-write
	envPrimary = "SQLELECT_REPLICA_PRIMARY_DSN"
	envStandby = "SQLELECT_REPLICA_STANDBY_DSN"
	envMariaDB = "SQLELECT_READONLY_MYSQL_DSN" // a user without SUPER
	envControl = "SQLELECT_REPLICA_CTL"        // the script
	expire     = 3 * time.Second
	interval   = 500 * time.Millisecond
	// writeTimeout bounds each fenced write of a leader.
	writeTimeout = time.Second
	waitLeading  = 30 * time.Second
)

// env returns the variable, skipping the test when the replica servers are
// not configured and failing it when they are but name is missing.
func env(t *testing.T, name string) string {
	t.Helper()
	if os.Getenv(envReplica) == "" {
		t.Skipf("%s is not set (internal/ci/pgreplica.sh starts the servers these tests need)", envReplica)
	}
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is set but %s is not; set what internal/ci/pgreplica.sh env prints", envReplica, name)
	}
	return v
}

// ctl runs the script with args.
func ctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(env(t, envControl), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("pgreplica.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func open(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	db, err := session.Open(dsn, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("session.Open: %v", err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}

func migrated(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	db := open(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatalf("migrate.Up: %v", err)
	}
	return db
}

// replayed waits until the standby has replayed everything the primary
// wrote so far, so that a schema just migrated on the primary is there.
func replayed(t *testing.T, primary, standby *gorm.DB) {
	t.Helper()
	var lsn string
	if err := primary.Raw("SELECT pg_current_wal_lsn()::text").Scan(&lsn).Error; err != nil {
		t.Fatalf("the primary's WAL position: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var done bool
		err := standby.Raw("SELECT pg_last_wal_replay_lsn() >= CAST(? AS pg_lsn)", lsn).Scan(&done).Error
		if err != nil {
			t.Fatalf("the standby's replay position: %v", err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby has not replayed the primary's WAL up to %s in 30s", lsn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logger shows the Electors' warnings with -v.
func electorLog(name string) *slog.Logger {
	var w io.Writer = io.Discard
	if testing.Verbose() {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})).With("elector", name)
}

// lead is one OnStartedLeading: who, in which term, and when (local clock).
type lead struct {
	name string
	term int64
	at   time.Time
}

// group is a few Electors, each on a pool of its own as separate processes
// would be, recording what they see in a Recorder and doing fenced writes
// while they lead.
type group struct {
	t      *testing.T
	ns     string
	rec    *electiontest.Recorder
	fence  *electiontest.Fence
	bystdr *election.Election
	leads  chan lead
	els    []*election.Elector
	stops  []context.CancelFunc
	done   []chan struct{}

	mu        sync.Mutex
	lastWrite time.Time // last fenced write committed
	writeErrs int
}

func startGroup(t *testing.T, dsn string, n int) *group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := &group{t: t, ns: "replicatest." + t.Name() + "." + uuid.NewString()[:8], rec: electiontest.NewRecorder(), leads: make(chan lead, 100)}
	admin := migrated(t, dsn)
	var err error
	if g.bystdr, err = election.New(admin, election.WithNamespace(g.ns), election.WithExpire(expire)); err != nil {
		t.Fatal(err)
	}
	if g.fence, err = electiontest.NewFence(ctx, admin, g.bystdr, g.rec); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		name := string(rune('a' + i))
		db := open(t, dsn)
		e, err := election.New(db, election.WithNamespace(g.ns), election.WithExpire(expire), election.WithLogger(electorLog(name)))
		if err != nil {
			t.Fatal(err)
		}
		fence, err := electiontest.NewFence(ctx, db, e, g.rec)
		if err != nil {
			t.Fatal(err)
		}
		var obs sync.Mutex // one participant's observations in order
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{
			Interval: interval,
			OnNewLeader: func(l election.Lease) {
				obs.Lock()
				defer obs.Unlock()
				g.rec.Observe(name, l)
			},
			OnStartedLeading: func(lctx context.Context, l election.Lease) {
				obs.Lock()
				g.rec.Observe(name, l)
				obs.Unlock()
				g.leads <- lead{name: name, term: l.Term, at: time.Now()}
				for lctx.Err() == nil {
					// Leader work bounds its own statements, as an
					// application's would: a write sent on a pooled
					// connection to a primary that froze under it
					// would otherwise wait for as long as the term
					// lasts, and a leader that keeps its term across
					// the failover would write nothing more.
					wctx, cancel := context.WithTimeout(lctx, writeTimeout)
					_, err := fence.Write(wctx, l)
					cancel()
					g.mu.Lock()
					if err == nil {
						g.lastWrite = time.Now()
					} else {
						g.writeErrs++
					}
					g.mu.Unlock()
					select {
					case <-lctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := el.Run(rctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		g.els, g.stops, g.done = append(g.els, el), append(g.stops, stop), append(g.done, done)
	}
	t.Cleanup(g.stop)
	return g
}

// next waits for a leader that started after since, failing the test when
// none does within waitLeading.
func (g *group) next(since time.Time) lead {
	g.t.Helper()
	deadline := time.After(waitLeading)
	for {
		select {
		case l := <-g.leads:
			if l.at.After(since) {
				return l
			}
		case <-deadline:
			buf := make([]byte, 1<<22)
			os.WriteFile("/tmp/replicatest-stacks.txt", buf[:runtime.Stack(buf, true)], 0o644)
			g.t.Fatalf("no leader within %v", waitLeading)
		}
	}
}

// leading reports whether any Elector of the group leads.
func (g *group) leading() bool {
	for _, el := range g.els {
		if el.IsLeader() {
			return true
		}
	}
	return false
}

// writtenSince reports whether a fenced write committed after t.
func (g *group) writtenSince(t time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastWrite.After(t)
}

// stop stops the followers first, then the leader, so that no term begins
// after the leader's early release; and records that release.
func (g *group) stop() {
	if g.stops == nil {
		return
	}
	var leaders []int
	for i, el := range g.els {
		if el.IsLeader() {
			leaders = append(leaders, i)
			continue
		}
		g.stops[i]()
		<-g.done[i]
	}
	for _, i := range leaders {
		g.rec.Released(g.els[i].Observed())
		g.stops[i]()
		<-g.done[i]
	}
	g.stops = nil
}

// check stops the group and fails the test on any violation of mutual
// exclusion among the terms and writes seen.
func (g *group) check(db *gorm.DB) {
	g.t.Helper()
	g.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if db != nil {
		f, err := electiontest.NewFence(ctx, db, g.bystdr, g.rec)
		if err != nil {
			g.t.Fatal(err)
		}
		if err := f.Load(ctx); err != nil {
			g.t.Fatalf("loading the fenced writes: %v", err)
		}
	}
	res := g.rec.Check()
	g.t.Logf("checker: %s", res)
	if err := res.Err(); err != nil {
		g.t.Fatal(err)
	}
}

// waitUntil polls cond every 10 ms for up to d and reports how long it took.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// synchronous waits until the primary db replicates synchronously
// to the replica (pg_stat_replication.sync_state = 'sync': a commit returns
// only once the replica has it), failing the test after 10 s. After
// "pgreplica.sh sync on" the state changes once the WAL sender has read the
// reloaded configuration.
func synchronous(t *testing.T, db *gorm.DB) {
	t.Helper()
	var last []string
	waitUntil(t, 10*time.Second, "synchronous replication (pg_stat_replication.sync_state = 'sync')", func() bool {
		last = nil
		if err := db.Raw("SELECT sync_state FROM pg_stat_replication").Scan(&last).Error; err != nil {
			t.Fatalf("pg_stat_replication: %v", err)
		}
		return len(last) == 1 && last[0] == "sync"
	})
	t.Logf("pg_stat_replication.sync_state: %v", last)
}

// syncLog is a slog handler's output, safe for concurrent use.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestStandbyReadOnly: on a standby (a DSN that names it by mistake) every
// call that writes fails with ErrReadOnly, and an Elector logs each failed
// round at error level as a read-only database.
func TestStandbyReadOnly(t *testing.T) {
	primary := migrated(t, env(t, envPrimary)) // the schema reaches the standby by replication
	db := open(t, env(t, envStandby))
	replayed(t, primary, db)
	ns := "replicatest.standby." + uuid.NewString()[:8]
	var log syncLog
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(expire),
		election.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatalf("election.New on the standby: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, call := range []struct {
		name string
		fn   func() error
	}{
		{"Elect", func() error { _, err := e.Elect(ctx, uuid.New()); return err }},
		{"RegisterCandidate", func() error { return e.RegisterCandidate(ctx, uuid.New()) }},
		{"UnregisterCandidate", func() error { return e.UnregisterCandidate(ctx, uuid.New()) }},
	} {
		if err := call.fn(); !errors.Is(err, election.ErrReadOnly) {
			t.Errorf("%s on the standby: %v, want ErrReadOnly", call.name, err)
		} else {
			t.Logf("%s: %v", call.name, err)
		}
	}
	if _, err := e.Leader(ctx); err != nil {
		t.Errorf("Leader (a read) on the standby: %v", err)
	}

	el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = el.Run(rctx) }()
	waitUntil(t, 10*time.Second, "an error-level log of the read-only database", func() bool {
		s := log.String()
		return strings.Contains(s, "level=ERROR") && strings.Contains(s, "read-only")
	})
	stop()
	<-done
	if el.IsLeader() {
		t.Error("an Elector on a standby leads")
	}
}

// readOnlyAndBack switches the server read-only (ctl ARG on) under a group
// of Electors and back (ctl ARG off), in a way that leaves the sessions
// pooled while it was read-only still read-only afterwards, as they were
// in the field: only connections opened after the switch back can write.
//
// The leader steps down before its lease ends. With the pool discarding
// connections that answered read-only (discard), a candidate leads soon
// after the switch back, on new connections, and a fenced write commits.
// Without it (the negative control, dialect.DisableDiscard), no candidate
// leads within that bound: the pooled sessions keep refusing, which shows
// that the first case passes because of the discarding and not because the
// server made the old sessions writable again. Turning the discarding back
// on then brings a leader on the same pools. One leader at a time.
func readOnlyAndBack(t *testing.T, dsn, arg string, discard bool) {
	t.Cleanup(func() { ctl(t, arg, "reset") })
	ctl(t, arg, "reset")
	var restore func()
	if !discard {
		restore = dialect.DisableDiscard()
		t.Cleanup(restore)
	}
	g := startGroup(t, dsn, 3)
	first := g.next(time.Time{})
	t.Logf("leader %s, term %d", first.name, first.term)
	time.Sleep(interval)

	ctl(t, arg, "on")
	down := waitUntil(t, 2*expire, "the leader stepping down", func() bool { return !g.leading() })
	t.Logf("read-only: the leader stepped down %v after the switch (trust window %v)", down, expire-expire/5)
	time.Sleep(2 * interval) // rounds fail read-only, and open sessions read-only

	ctl(t, arg, "off")
	back := time.Now()
	bound := expire + 2*interval
	if discard {
		l := g.next(back)
		t.Logf("read-write again: %s leads in term %d, %v after the switch back", l.name, l.term, l.at.Sub(back))
		if l.at.Sub(back) > bound {
			t.Errorf("a leader %v after the switch back, want within the lease and a round (%v)", l.at.Sub(back), bound)
		}
	} else {
		// Nothing signals that a leader will never come: wait out the
		// bound the case with the discarding keeps, and a margin.
		select {
		case l := <-g.leads:
			t.Fatalf("without the discarding, %s led in term %d %v after the switch back: the pooled sessions did not stay read-only, and the test proves nothing about the discarding",
				l.name, l.term, l.at.Sub(back))
		case <-time.After(bound + 2*time.Second):
			t.Logf("without the discarding, no leader %v after the switch back: the pooled sessions stay read-only", bound+2*time.Second)
		}
		if g.writtenSince(back) {
			t.Fatal("without the discarding, a fenced write committed after the switch back")
		}
		on := time.Now()
		restore()
		l := g.next(on)
		t.Logf("discarding on again: %s leads in term %d, %v later", l.name, l.term, l.at.Sub(on))
		back = on
	}
	waitUntil(t, 5*time.Second, "a fenced write after the switch back", func() bool { return g.writtenSince(back) })
	g.check(open(t, dsn))
}

// TestPostgresReadOnlyAndBack: the primary's database switched to
// default_transaction_read_only and back (readOnlyAndBack). Sessions keep
// the setting they started with, and sessions open when it was switched on
// by a configuration reload keep it too: after the switch back only new
// connections can write.
func TestPostgresReadOnlyAndBack(t *testing.T) {
	dsn := env(t, envPrimary)
	t.Run("discard", func(t *testing.T) { readOnlyAndBack(t, dsn, "readonly", true) })
	t.Run("negative control: no discard", func(t *testing.T) { readOnlyAndBack(t, dsn, "readonly", false) })
}

// TestMariaDBReadOnlyAndBack: the same with MariaDB's read_only, seen by a
// user without SUPER (READ ONLY ADMIN), which read_only binds, and
// tx_read_only, which a session takes when it connects: the user's
// connections are killed when the server goes read-only, so that every
// session it opens until the switch back stays read-only after it
// (read_only alone applies to every session at once, both ways, and needs
// no discarding).
func TestMariaDBReadOnlyAndBack(t *testing.T) {
	dsn := env(t, envMariaDB)
	t.Run("discard", func(t *testing.T) { readOnlyAndBack(t, dsn, "maria-readonly", true) })
	t.Run("negative control: no discard", func(t *testing.T) { readOnlyAndBack(t, dsn, "maria-readonly", false) })
}

// TestHungPrimaryFailover: Electors on a multi-host DSN with
// target_session_attrs=read-write; the primary freezes (SIGSTOP: it accepts
// connections and never answers) and the replica, replicating
// synchronously, is promoted. A candidate leads on the new primary within a
// bounded time, its fenced writes go through, and no two terms overlap.
func TestHungPrimaryFailover(t *testing.T) {
	dsn := env(t, envReplica)
	t.Cleanup(func() { ctl(t, "reset") }) // last: after the pools are closed
	ctl(t, "sync", "on")
	synchronous(t, open(t, env(t, envPrimary)))
	g := startGroup(t, dsn, 3)
	first := g.next(time.Time{})
	t.Logf("leader %s, term %d", first.name, first.term)
	time.Sleep(2 * interval)

	ctl(t, "hang")
	t.Cleanup(func() { ctl(t, "resume") }) // first: frozen connections close at once
	hung := time.Now()
	ctl(t, "promote")
	promoted := time.Now()
	t.Logf("primary frozen; replica promoted %v later", promoted.Sub(hung))
	// A leader whose renewal reached the new primary within its trust
	// window keeps its term; otherwise the next term begins once the old
	// lease has run out there. Either way leader work must go on: a fenced
	// write commits on the new primary. That takes at most the old lease, a
	// round and a connection past the frozen host (a tenth of the window, 1
	// s), and the pool closing what it holds to the frozen host.
	w := waitUntil(t, 30*time.Second, "a fenced write on the new primary", func() bool { return g.writtenSince(promoted) })
	t.Logf("first fenced write on the new primary %v after the promotion (%v after the freeze)", w, w+promoted.Sub(hung))
	if limit := expire + 2*interval + 2*time.Second; w > limit {
		t.Errorf("leader work resumed %v after the promotion, want within %v", w, limit)
	}
	select {
	case l := <-g.leads:
		t.Logf("%s leads in term %d, %v after the promotion", l.name, l.term, l.at.Sub(promoted))
	default:
		t.Logf("the leader kept term %d across the failover", first.term)
	}
	g.check(open(t, env(t, envStandby)))
}

// TestSyncReplicaKeepsTerm: with synchronous replication
// (synchronous_standby_names), a term granted on the primary is on the
// replica when the primary dies: the promoted replica names the same leader
// and term, and does not grant the seat to another candidate while that
// lease lives.
func TestSyncReplicaKeepsTerm(t *testing.T) {
	primary, standby := env(t, envPrimary), env(t, envStandby)
	t.Cleanup(func() { ctl(t, "reset") })
	ctl(t, "sync", "on")
	db := migrated(t, primary)
	synchronous(t, db)
	ns := "replicatest.sync." + uuid.NewString()[:8]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	a := uuid.New()
	var lease election.Lease
	for i := 0; i < 3; i++ { // three terms: vacate between them
		if lease, err = e.Elect(ctx, a); err != nil || !lease.HeldBy(a) {
			t.Fatalf("Elect: %+v, %v", lease, err)
		}
		if i < 2 {
			if err := e.Resign(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Still synchronous when the last term was granted: a replica that lost
	// it would prove nothing about synchronous replication.
	var states []string
	if err := db.Raw("SELECT sync_state FROM pg_stat_replication").Scan(&states).Error; err != nil || len(states) != 1 || states[0] != "sync" {
		t.Fatalf("pg_stat_replication.sync_state before the failover: %v, %v; want [sync]", states, err)
	}
	ctl(t, "kill") // at once after the commit returned
	ctl(t, "promote")
	e2, err := election.New(open(t, standby), election.WithNamespace(ns), election.WithExpire(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got, err := e2.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Leader != lease.Leader || got.Term != lease.Term {
		t.Fatalf("promoted replica: leader %v term %d, want %v term %d", got.Leader, got.Term, lease.Leader, lease.Term)
	}
	b := uuid.New()
	other, err := e2.Elect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !other.HeldBy(a) || other.Term != lease.Term {
		t.Fatalf("another candidate's Elect on the promoted replica: %+v, want term %d still held by %v", other, lease.Term, a)
	}
	t.Logf("term %d survived the failover", got.Term)
}

// TestPrimaryDownFailover: Electors on a multi-host DSN with
// target_session_attrs=read-write; the primary stops (a fast shutdown: its
// sessions get 57P01, then connections are refused) or crashes (SIGKILL:
// connections reset, then refused), and the replica, replicating
// synchronously, is promoted at once. Leader work resumes on the new
// primary (a fenced write commits) within the old lease and a round of the
// promotion, whether the leader kept its term there or a new term began,
// and no two terms overlap.
func TestPrimaryDownFailover(t *testing.T) {
	for _, c := range []struct{ name, cmd string }{{"stopped", "stop-primary"}, {"crashed", "kill"}} {
		t.Run(c.name, func(t *testing.T) {
			dsn := env(t, envReplica)
			t.Cleanup(func() { ctl(t, "reset") }) // last: after the pools are closed
			ctl(t, "sync", "on")
			synchronous(t, open(t, env(t, envPrimary)))
			g := startGroup(t, dsn, 3)
			first := g.next(time.Time{})
			t.Logf("leader %s, term %d", first.name, first.term)
			time.Sleep(2 * interval)

			ctl(t, c.cmd)
			down := time.Now()
			ctl(t, "promote")
			promoted := time.Now()
			t.Logf("primary %s; replica promoted %v later", c.name, promoted.Sub(down))
			w := waitUntil(t, 30*time.Second, "a fenced write on the new primary", func() bool { return g.writtenSince(promoted) })
			t.Logf("first fenced write on the new primary %v after the promotion (%v after the primary went down)", w, w+promoted.Sub(down))
			if limit := expire + 2*interval; w > limit {
				t.Errorf("leader work resumed %v after the promotion, want within the lease and a round (%v)", w, limit)
			}
			select {
			case l := <-g.leads:
				t.Logf("%s leads in term %d, %v after the promotion", l.name, l.term, l.at.Sub(promoted))
			default:
				t.Logf("the leader kept term %d across the failover", first.term)
			}
			g.check(open(t, env(t, envStandby)))
		})
	}
}
