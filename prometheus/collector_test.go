package prometheus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// target is a database to test against: SQLite in a temporary file, and
// the servers named by SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN (the
// core module's test settings). With CI=true a missing server fails.
type target struct{ name, dsn string }

func targets(t *testing.T) []target {
	t.Helper()
	out := []target{{"sqlite", ""}}
	for _, s := range []struct{ name, env string }{{"postgres", "SQLELECT_POSTGRES_DSN"}, {"mysql", "SQLELECT_MYSQL_DSN"}} {
		dsn := os.Getenv(s.env)
		if dsn == "" {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true but %s is not set", s.env)
			}
			continue
		}
		out = append(out, target{s.name, dsn})
	}
	return out
}

func open(t *testing.T, tg target) *gorm.DB {
	t.Helper()
	dsn := tg.dsn
	if dsn == "" {
		dsn = "sqlite:" + filepath.Join(t.TempDir(), "election.db")
	}
	db, err := session.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

func namespace(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b[:])
}

// eventually waits up to 30 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func run(t *testing.T, el *election.Elector) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	var once bool
	t.Cleanup(func() {
		if !once {
			stop()
		}
	})
	return func() { once = true; stop() }
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestCollectorRealElections: two Electors in separate Elections (as two
// processes would be) report to one Collector; the metrics follow a grant,
// renewals, a follower, a resignation and the handoff, on each database.
func TestCollectorRealElections(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			db := open(t, tg)
			ns := namespace(t)
			c := NewCollector()
			reg := prom.NewPedanticRegistry()
			reg.MustRegister(c)
			newElector := func(interval time.Duration) (*election.Election, *election.Elector) {
				e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(3*time.Second), election.WithObserver(c), election.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval, ShutdownTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return e, el
			}
			ea, a := newElector(200 * time.Millisecond)
			_, b := newElector(200 * time.Millisecond)
			c.Watch(ea)

			if got := testutil.ToFloat64(c.isLeader.WithLabelValues(ns)); got != 0 {
				t.Fatalf("is_leader before any Elector ran = %v", got)
			}
			stopA := run(t, a)
			eventually(t, "is_leader 1", func() bool { return testutil.ToFloat64(c.isLeader.WithLabelValues(ns)) == 1 })
			eventually(t, "a renewal", func() bool { return testutil.ToFloat64(c.elections.WithLabelValues(ns, "renewed")) >= 1 })
			if got := testutil.ToFloat64(c.elections.WithLabelValues(ns, "led")); got != 1 {
				t.Fatalf("elections_total{outcome=led} = %v, want 1", got)
			}
			run(t, b)
			eventually(t, "a follower round", func() bool { return testutil.ToFloat64(c.elections.WithLabelValues(ns, "follower")) >= 1 })
			eventually(t, "two live candidates", func() bool {
				_ = testutil.CollectAndCount(c, "sqlelect_candidates") // a scrape reads them
				return testutil.ToFloat64(c.candidates.WithLabelValues(ns)) == 2
			})
			time.Sleep(50 * time.Millisecond)
			if ten := testutil.ToFloat64(c.tenure); ten <= 0 {
				t.Fatalf("tenure_seconds = %v while leading", ten)
			}
			if err := a.Resign(context.Background()); err != nil {
				t.Fatal(err)
			}
			// b takes over: a second term, seen as one leadership change.
			eventually(t, "b's grant", func() bool { return testutil.ToFloat64(c.elections.WithLabelValues(ns, "led")) == 2 })
			eventually(t, "one leadership change", func() bool { return testutil.ToFloat64(c.changes.WithLabelValues(ns)) == 1 })
			if got := testutil.ToFloat64(c.stops.WithLabelValues(ns, "resigned")); got != 1 {
				t.Fatalf("leadership_stops_total{reason=resigned} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(c.term.WithLabelValues(ns)); got < 2 {
				t.Fatalf("term = %v, want at least 2", got)
			}
			if got := testutil.ToFloat64(c.isLeader.WithLabelValues(ns)); got != 1 {
				t.Fatalf("is_leader with b leading = %v, want 1", got)
			}
			stopA()
			if n := testutil.CollectAndCount(c, "sqlelect_attempt_duration_seconds"); n != 1 {
				t.Fatalf("attempt_duration_seconds series = %d, want 1", n)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather: %v", err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "sqlelect_attempt_duration_seconds" {
					if h := mf.GetMetric()[0].GetHistogram(); h.GetSampleCount() < 4 || h.GetSampleSum() <= 0 {
						t.Fatalf("attempt_duration_seconds: %d samples, sum %v", h.GetSampleCount(), h.GetSampleSum())
					}
				}
			}
			if n := testutil.CollectAndCount(c.errors); n != 0 {
				t.Fatalf("errors_total has %d series with a healthy database", n)
			}
		})
	}
}

// TestCollectorErrorsAndStepDown: when the database goes away under the
// leader (its pool is closed), rounds fail with an error class, the leader
// steps down by its trust window, and is_leader and tenure fall to 0.
func TestCollectorErrorsAndStepDown(t *testing.T) {
	db := open(t, target{"sqlite", ""})
	ns := namespace(t)
	c := NewCollector()
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(2*time.Second), election.WithObserver(c), election.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	c.Watch(e)
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 300 * time.Millisecond, SafetyMargin: 800 * time.Millisecond, ShutdownTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, el)
	eventually(t, "is_leader 1", func() bool { return testutil.ToFloat64(c.isLeader.WithLabelValues(ns)) == 1 })
	sqlDB, _ := db.DB()
	sqlDB.Close()
	eventually(t, "the step-down", func() bool { return testutil.ToFloat64(c.stops.WithLabelValues(ns, "stepped_down")) == 1 })
	if got := testutil.ToFloat64(c.isLeader.WithLabelValues(ns)); got != 0 {
		t.Fatalf("is_leader after stepping down = %v", got)
	}
	if got := testutil.ToFloat64(c.tenure.WithLabelValues(ns)); got != 0 {
		t.Fatalf("tenure after stepping down = %v", got)
	}
	if got := testutil.ToFloat64(c.errors.WithLabelValues(ns, "other")); got < 1 {
		t.Fatalf("errors_total{class=other} = %v, want failed rounds", got)
	}
	// A scrape that cannot read the candidates keeps going.
	if n := testutil.CollectAndCount(c, "sqlelect_candidates_errors_total"); n != 1 {
		t.Fatalf("candidates_errors_total series = %d", n)
	}
	if got := testutil.ToFloat64(c.candErrors.WithLabelValues(ns)); got < 1 {
		t.Fatalf("candidates_errors_total = %v", got)
	}
}

// TestCollectorLint: the metrics follow Prometheus's naming conventions.
func TestCollectorLint(t *testing.T) {
	c := NewCollector()
	c.Attempt(election.Attempt{Namespace: "n", Outcome: election.OutcomeLed, Duration: time.Millisecond, Lease: election.Lease{Term: 1}})
	c.HandoffWake(election.Wake{Namespace: "n", Source: "local"})
	c.Attempt(election.Attempt{Namespace: "n", Outcome: election.OutcomeError, ErrorClass: election.ClassTimeout, Err: context.DeadlineExceeded})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// BenchmarkCollectorAttempt is the cost the Collector adds to an election
// round: counters and a histogram in memory, no database call.
func BenchmarkCollectorAttempt(b *testing.B) {
	c := NewCollector()
	a := election.Attempt{Namespace: "bench", Outcome: election.OutcomeRenewed, Duration: 2 * time.Millisecond, Lease: election.Lease{Term: 7}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Attempt(a)
	}
}
