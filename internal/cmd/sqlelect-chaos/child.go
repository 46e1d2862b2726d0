package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/session"
)

// Environment of a child process.
const (
	envDSN        = "SQLELECT_CHAOS_DSN"
	envName       = "SQLELECT_CHAOS_NAME"
	envNamespaces = "SQLELECT_CHAOS_NAMESPACES" // comma-separated
	envElectors   = "SQLELECT_CHAOS_ELECTORS"   // per namespace
	envExpire     = "SQLELECT_CHAOS_EXPIRE"
	envInterval   = "SQLELECT_CHAOS_INTERVAL"
	envUnfenced   = "SQLELECT_CHAOS_UNFENCED" // "1": leaders write without Guard
	envGroup      = "SQLELECT_CHAOS_GROUP"    // "1": Groups over all namespaces instead of Electors
	envUntil      = "SQLELECT_CHAOS_UNTIL"    // RFC 3339: the end of the run, the bound of retries at start
)

// refreshCandidateSQL begins the statement by which Elect refreshes the
// caller's candidate row, with its identity, with times read from the
// database clock (a heartbeat's own statement reads the clock itself:
// INSERT ... SELECT; SQLite's one-statement renewal writes no identity).
const refreshCandidateSQL = "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at, hostname, pid, label) VALUES"

// refreshGrantSQL begins the statement by which Elect, on PostgreSQL,
// refreshes the caller's row as it takes a seat (RefreshGrantTerm): the
// refresh of such an Elect.
const refreshGrantSQL = "WITH r AS (" + refreshCandidateSQL

// acquireSQL begins the statement by which Elect, on PostgreSQL, runs in
// one statement (Acquire), refreshing the caller's row unless a Group's
// rounds keep it.
const acquireSQL = "WITH seen AS ("

// isMariaAcquire reports whether q is MariaDB's Elect in one compound
// statement (its vacating statement declares no lapsed term's reason).
func isMariaAcquire(q string) bool {
	return strings.HasPrefix(q, "BEGIN NOT ATOMIC") && strings.Contains(q, "v_lapsed")
}

// isSQLiteGrant reports whether q is SQLite's Elect writing a free seat in
// one call (BEGIN IMMEDIATE to COMMIT, the history written for the grant).
func isSQLiteGrant(q string) bool {
	return strings.HasPrefix(q, "BEGIN IMMEDIATE; ") && strings.Contains(q, "INSERT INTO election_history")
}

// event is one line a child writes to its stdout for the parent.
type event struct {
	// Kind is "obs" (Lease seen by Observer), "rel" (Lease about to be
	// given up), "relwin" (Release: whatever a candidate holds is about to
	// be given up), "count" (Elections so far), "ready", or "err" (Msg).
	Kind      string                `json:"k"`
	Observer  string                `json:"o,omitempty"`
	Lease     *election.Lease       `json:"l,omitempty"`
	Release   *electiontest.Release `json:"r,omitempty"`
	Elections int64                 `json:"n,omitempty"`
	Msg       string                `json:"m,omitempty"`
}

// emitter writes events as JSON lines, flushing often: a SIGKILL loses at
// most the last few observations, which only makes the check see less.
// Releases are flushed before they happen.
type emitter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (e *emitter) emit(ev event, flush bool) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(append(b, '\n'))
	if flush {
		_ = e.w.Flush()
	}
}

func (e *emitter) flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.w.Flush()
}

// childConfig is read from the environment.
type childConfig struct {
	dsn, name  string
	namespaces []string
	electors   int
	expire     time.Duration
	interval   time.Duration
	unfenced   bool
	group      bool // each of the electors is a Group over every namespace
	until      time.Time
}

func childConfigFromEnv() (childConfig, error) {
	c := childConfig{dsn: os.Getenv(envDSN), name: os.Getenv(envName), namespaces: strings.Split(os.Getenv(envNamespaces), ","),
		unfenced: os.Getenv(envUnfenced) == "1", group: os.Getenv(envGroup) == "1"}
	var err error
	if _, err = fmt.Sscan(os.Getenv(envElectors), &c.electors); err != nil {
		return c, fmt.Errorf("%s: %w", envElectors, err)
	}
	if c.expire, err = time.ParseDuration(os.Getenv(envExpire)); err != nil {
		return c, fmt.Errorf("%s: %w", envExpire, err)
	}
	if c.interval, err = time.ParseDuration(os.Getenv(envInterval)); err != nil {
		return c, fmt.Errorf("%s: %w", envInterval, err)
	}
	if c.until, err = time.Parse(time.RFC3339Nano, os.Getenv(envUntil)); err != nil {
		return c, fmt.Errorf("%s: %w", envUntil, err)
	}
	return c, nil
}

// child runs the Electors of one process until SIGTERM (graceful: each
// Elector's Run unregisters) or SIGKILL. SIGUSR1 makes one leading Elector
// resign.
func child() error {
	c, err := childConfigFromEnv()
	if err != nil {
		return err
	}
	// The mysql driver logs every connection the faults break; the
	// parent learns of failures from the events.
	_ = mysqldrv.SetLogger(log.New(io.Discard, "", 0))
	out := &emitter{w: bufio.NewWriterSize(os.Stdout, 64<<10)}
	defer out.flush()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	// Count election rounds that reach the database: every Elect makes
	// one of these statements, the refresh of its candidate row with the
	// times it read from the database clock (on the locked path and on a
	// follower's unlocked one), PostgreSQL's and MariaDB's one-statement
	// Elect, SQLite's one call writing a free seat, or the leader's
	// one-statement renewal. A Group's round refreshes its member row
	// once for all its namespaces, each of which counts one round; its
	// attempts are not rounds.
	var elections atomic.Int64
	counter := &rtcount.Counter{}
	counter.Observe = func(_ rtcount.Kind, q string) {
		if c.group {
			if n, ok := dialect.GroupRoundNamespaces(q); ok {
				// PostgreSQL's or MariaDB's round, one statement.
				elections.Add(int64(n))
			} else if strings.HasPrefix(q, "INSERT INTO election_members") || strings.Contains(q, "STRAIGHT_JOIN election_members") {
				elections.Add(int64(len(c.namespaces)))
			}
			return
		}
		switch {
		case strings.HasPrefix(q, refreshCandidateSQL), strings.HasPrefix(q, refreshGrantSQL),
			strings.HasPrefix(q, acquireSQL), isMariaAcquire(q), isSQLiteGrant(q):
			elections.Add(1)
		case (strings.Contains(q, "UPDATE election_leaders") || strings.Contains(q, "STRAIGHT_JOIN election_leaders")) &&
			strings.Contains(q, "lease_expires_at >"):
			elections.Add(1)
		}
	}
	// A process may start while its connection is cut or the server
	// restarts: it retries until the end of the run rather than count as
	// a crash. Stopped meanwhile, it exits quietly.
	var db *gorm.DB
	if stopped := retryUntil(ctx, c.until, sigs, "opening the database", func() (err error) {
		db, err = session.OpenWrapped(c.dsn, counter.Wrap, &gorm.Config{Logger: logger.Discard})
		if errors.Is(err, session.ErrDSN) {
			return permanent{err}
		}
		return err
	}); stopped != nil {
		return ignoreStop(stopped)
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	d, err := dialect.For(db)
	if err != nil {
		return err
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var (
		shutting atomic.Bool
		runs     sync.WaitGroup
		mu       sync.Mutex
		electors []*election.Elector
		nsOf     = map[*election.Elector]string{}
	)
	dbNow := func() time.Time {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var now dialect.Time
		if err := db.WithContext(ctx).Raw(d.Statements().Clock).Row().Scan(&now); err != nil {
			return time.Time{}
		}
		return now.Time
	}
	if c.group {
		return childGroups(ctx, stop, db, c, sigs, out, dbNow, logger, &elections)
	}
	for _, ns := range c.namespaces {
		var (
			e     *election.Election
			fence *electiontest.Fence
		)
		if stopped := retryUntil(ctx, c.until, sigs, "joining "+ns, func() (err error) {
			e, err = election.New(db, election.WithNamespace(ns), election.WithExpire(c.expire), election.WithLogger(logger))
			if err != nil {
				return err
			}
			fence, err = electiontest.NewFence(ctx, db, e, nil)
			return err
		}); stopped != nil {
			return ignoreStop(stopped)
		}
		go watch(ctx, e, fmt.Sprintf("%s/%s/watch", c.name, ns), c.interval, out)
		for i := 0; i < c.electors; i++ {
			el, err := newChaosElector(e, fence, c, out, &shutting)
			if err != nil {
				return err
			}
			mu.Lock()
			electors = append(electors, el)
			nsOf[el] = ns
			mu.Unlock()
			runs.Add(1)
			go func() {
				defer runs.Done()
				if err := el.Run(ctx); err != nil {
					out.emit(event{Kind: "err", Msg: "Run: " + err.Error()}, true)
				}
			}()
		}
	}
	out.emit(event{Kind: "ready"}, true)

	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			out.emit(event{Kind: "count", Elections: elections.Load()}, true)
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				mu.Lock()
				els := append([]*election.Elector(nil), electors...)
				mu.Unlock()
				go resignOne(ctx, els, nsOf, dbNow, out)
				continue
			}
			// Graceful stop: from here on every lease an Elector gives up
			// is recorded as released before Run unregisters.
			// An Elector may also hold a lease it never heard of (its
			// Elect committed, the answer was lost): whatever each holds
			// from now on is given up, by the database clock. The
			// candidates never come back, so the window stays open.
			shutting.Store(true)
			from := dbNow()
			for _, el := range electors {
				if l := el.Observed(); l.HeldBy(el.ID()) {
					out.emit(event{Kind: "rel", Lease: &l}, false)
				}
				out.emit(event{Kind: "relwin", Release: &electiontest.Release{Namespace: nsOf[el], Candidate: el.ID(), From: from}}, false)
			}
			out.flush()
			stop()
			runs.Wait()
			out.emit(event{Kind: "count", Elections: elections.Load()}, true)
			return nil
		}
	}
}

// errStopped is returned by retryUntil when the parent stopped the process.
var errStopped = errors.New("stopped before the database answered")

// permanent marks an error that retrying cannot mend.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// ignoreStop turns a stop requested by the parent into a quiet exit.
func ignoreStop(err error) error {
	if errors.Is(err, errStopped) {
		return nil
	}
	return err
}

// retryUntil calls fn until it succeeds, returns a permanent error, or until
// passes, pausing a little between calls. A SIGTERM or SIGINT meanwhile ends
// it with errStopped; a SIGUSR1 (resign one leader) has nothing to act on
// yet and is ignored.
func retryUntil(ctx context.Context, until time.Time, sigs <-chan os.Signal, what string, fn func() error) error {
	for {
		err := fn()
		var p permanent
		switch {
		case err == nil:
			return nil
		case errors.As(err, &p):
			return p.error
		case time.Now().After(until):
			return fmt.Errorf("%s: still failing at the end of the run: %w", what, err)
		}
		t := time.NewTimer(200 * time.Millisecond)
	wait:
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGUSR1 {
					t.Stop()
					return errStopped
				}
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
				break wait
			}
		}
	}
}

// newChaosElector makes an Elector that reports what it sees and, while it
// leads, makes fenced writes.
func newChaosElector(e *election.Election, fence *electiontest.Fence, c childConfig, out *emitter, shutting *atomic.Bool) (*election.Elector, error) {
	id := uuid.New()
	base := fmt.Sprintf("%s/%s/%s", c.name, e.Namespace(), id.String()[:8])
	var el *election.Elector
	cfg := election.ElectorConfig{
		Interval:        c.interval,
		ShutdownTimeout: 5 * time.Second,
		OnNewLeader: func(l election.Lease) {
			out.emit(event{Kind: "obs", Observer: base + "/cb", Lease: &l}, false)
		},
		OnStartedLeading: func(ctx context.Context, l election.Lease) {
			out.emit(event{Kind: "obs", Observer: base + "/start", Lease: &l}, false)
			lead(ctx, el.Observed, fence, l, base+"/work", c, out)
		},
		OnStoppedLeading: func(l election.Lease) {
			if shutting.Load() {
				// Run unregisters next, which may vacate this term early.
				out.emit(event{Kind: "rel", Lease: &l}, true)
			}
		},
	}
	var err error
	el, err = e.NewElector(id, cfg)
	return el, err
}

// lead is the leader's work: fenced writes with the term it was granted,
// until leadership ends. Each round it also reports the latest lease the
// Elector or Group holds (cur), so renewals are seen.
func lead(ctx context.Context, cur func() election.Lease, fence *electiontest.Fence, l election.Lease, observer string, c childConfig, out *emitter) {
	interval := c.interval
	write := fence.Write
	if c.unfenced {
		write = fence.WriteUnguarded
	}
	for ctx.Err() == nil {
		now := cur()
		out.emit(event{Kind: "obs", Observer: observer, Lease: &now}, false)
		wctx, cancel := context.WithTimeout(ctx, interval*2)
		if c.unfenced {
			// Trust the lease as the application would, ignoring the
			// leader's context: a frozen leader writes on when it wakes.
			wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), interval*2)
		}
		_, err := write(wctx, l)
		timedOut := wctx.Err() != nil
		cancel()
		if err != nil && !errors.Is(err, election.ErrNotLeader) && ctx.Err() == nil && !timedOut && !transient(err) {
			out.emit(event{Kind: "err", Msg: "fenced write: " + err.Error()}, false)
		}
		sleep(ctx, time.Duration(rand.Int64N(int64(interval)/2+1)))
	}
}

// transient reports errors expected under the injected faults: timeouts,
// lost connections, lock waits and busy databases.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, election.ErrConflict) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"connection", "broken pipe", "eof", "bad connection", "timeout", "deadlock", "lock", "busy",
		"terminating", "shutting down", "starting up", "server closed", "reset", "refused", "duplicate", "unique"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// watch polls the namespace's lease as a bystander, so the check sees the
// database's own view of every renewal.
func watch(ctx context.Context, e *election.Election, observer string, interval time.Duration, out *emitter) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, interval*2)
		l, err := e.Leader(cctx)
		cancel()
		if err == nil {
			out.emit(event{Kind: "obs", Observer: observer, Lease: &l}, false)
		}
		sleep(ctx, interval)
	}
}

// resignOne makes a leading Elector, if any, hand over. What it gives up is
// recorded first, as its lease and as a window of the database clock that
// bounds the call (in case it holds a newer term by the time it resigns).
func resignOne(ctx context.Context, els []*election.Elector, nsOf map[*election.Elector]string, dbNow func() time.Time, out *emitter) {
	for _, el := range els {
		if !el.IsLeader() {
			continue
		}
		from := dbNow()
		if from.IsZero() {
			return // the database is away; the Resign would fail anyway
		}
		l := el.Observed()
		out.emit(event{Kind: "rel", Lease: &l}, false)
		// The call is bounded by its 2 s context; the window allows more.
		// Once the call is over, a second event with the same key narrows
		// the window to the database clock read after it.
		key := el.ID().String() + "@" + from.Format(time.RFC3339Nano)
		win := electiontest.Release{Namespace: nsOf[el], Candidate: el.ID(), From: from, To: from.Add(5 * time.Second)}
		out.emit(event{Kind: "relwin", Observer: key, Release: &win}, true)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := el.Resign(rctx); err != nil && !transient(err) && !errors.Is(err, election.ErrNotLeader) {
			out.emit(event{Kind: "err", Msg: "Resign: " + err.Error()}, true)
		}
		if to := dbNow(); !to.IsZero() && to.Before(win.To) {
			win.To = to
			out.emit(event{Kind: "relwin", Observer: key, Release: &win}, true)
		}
		return
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
