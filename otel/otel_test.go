package otel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/XSAM/otelsql"
	drv "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// target is a database/sql driver and DSN: SQLite in a temporary file, and
// the servers named by SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN; with
// CI=true a missing server fails.
type target struct{ name, driver, dsn string }

func targets(t *testing.T) []target {
	t.Helper()
	out := []target{{"sqlite", "sqlite3", ""}}
	if dsn := os.Getenv("SQLELECT_POSTGRES_DSN"); dsn != "" {
		out = append(out, target{"postgres", "pgx", dsn})
	} else if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but SQLELECT_POSTGRES_DSN is not set")
	}
	if dsn := os.Getenv("SQLELECT_MYSQL_DSN"); dsn != "" {
		cfg, err := drv.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ParseTime = true
		out = append(out, target{"mysql", "mysql", cfg.FormatDSN()})
	} else if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but SQLELECT_MYSQL_DSN is not set")
	}
	return out
}

// openTraced opens tg's database through otelsql, spans going to tp, and
// adopts the pool with session.Wrap, as docs/api.md shows.
func openTraced(t *testing.T, tg target, dsn string, tp *sdktrace.TracerProvider) *gorm.DB {
	t.Helper()
	sqlDB, err := otelsql.Open(tg.driver, dsn, otelsql.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	sqlDB.SetMaxIdleConns(8)
	db, err := session.Wrap(sqlDB)
	if err != nil {
		t.Fatalf("session.Wrap of an otelsql pool: %v", err)
	}
	if got, _ := db.DB(); got != sqlDB {
		t.Fatal("Wrap does not run on the given pool")
	}
	return db
}

// wakes records the handoff wakes of the Electors.
type wakes struct {
	election.NopObserver
	mu  sync.Mutex
	got []election.Wake
}

func (w *wakes) HandoffWake(x election.Wake) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, x)
}

func (w *wakes) sources() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, x := range w.got {
		out = append(out, x.Source)
	}
	return out
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out (%v) waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func run(t *testing.T, el *election.Elector) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// TestElectionsThroughOtelsql: on each database, a pool opened with
// otelsql is adopted by session.Wrap, elections run on it and are traced.
// Two Electors elect a leader; when it resigns, the follower, whose
// interval is long, takes over at once. On PostgreSQL they run on two
// pools (two processes, as far as the handoff is concerned), and the
// follower is woken by a NOTIFY that its LISTEN, on the pgx connection
// under otelsql's, received.
func TestElectionsThroughOtelsql(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			dsn := tg.dsn
			if tg.name == "sqlite" {
				dsn = "file:" + filepath.Join(t.TempDir(), "e.db") + "?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate"
			}
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			dbA := openTraced(t, tg, dsn, tp)
			dbB := openTraced(t, tg, dsn, tp)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := migrate.Up(ctx, dbA); err != nil {
				t.Fatal(err)
			}
			var b [6]byte
			_, _ = rand.Read(b[:])
			ns := "otel." + tg.name + "." + hex.EncodeToString(b[:])
			obs := &wakes{}
			elector := func(db *gorm.DB, interval time.Duration) *election.Elector {
				e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(30*time.Second),
					election.WithLogger(quiet), election.WithObserver(obs))
				if err != nil {
					t.Fatal(err)
				}
				el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval, ShutdownTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return el
			}
			a := elector(dbA, time.Second)
			run(t, a)
			waitFor(t, "a to lead", 30*time.Second, a.IsLeader)
			if n := len(spans.Ended()); n == 0 {
				t.Fatal("no spans recorded for the election's statements")
			}

			// b polls every 10 s: only a handoff wakes it sooner. On
			// PostgreSQL it runs on the other pool, and only a NOTIFY can
			// wake it; the other databases have no notifications, and b
			// shares a's pool, where the vacating transaction wakes it.
			if tg.name != "postgres" {
				dbB = dbA
			}
			fb := elector(dbB, 10*time.Second)
			run(t, fb)
			waitFor(t, "b to see a's lease", 30*time.Second, func() bool { return fb.Observed().HeldBy(a.ID()) })
			if tg.name == "postgres" {
				// b's handoff listener subscribes when b starts; give it the
				// time to confirm (its probe notification takes milliseconds).
				time.Sleep(500 * time.Millisecond)
			}
			resigned := time.Now()
			if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "b to take over after the handoff", 5*time.Second, fb.IsLeader)
			t.Logf("takeover %v after Resign; wakes %v", time.Since(resigned), obs.sources())
			if tg.name == "postgres" {
				found := false
				for _, s := range obs.sources() {
					found = found || s == "notify"
				}
				if !found {
					t.Fatalf("wakes %v: want a NOTIFY wake through otelsql's connection", obs.sources())
				}
			}
			var statements int
			for _, s := range spans.Ended() {
				if strings.HasPrefix(s.Name(), "sql.") {
					statements++
				}
			}
			if statements == 0 {
				t.Fatal("no sql spans")
			}
		})
	}
}
