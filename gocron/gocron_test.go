package gocron_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	sqlelectgocron "github.com/sqlelect/sqlelect/gocron"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// targets: SQLite in a temporary file, and the servers named by
// SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN; with CI=true a missing
// server fails.
func targets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{"sqlite": ""}
	for name, env := range map[string]string{"postgres": "SQLELECT_POSTGRES_DSN", "mysql": "SQLELECT_MYSQL_DSN"} {
		dsn := os.Getenv(env)
		if dsn == "" {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true but %s is not set", env)
			}
			continue
		}
		out[name] = dsn
	}
	return out
}

func open(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
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

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replica is one process: an Elector and a scheduler running a job that
// counts its runs.
type replica struct {
	el   *election.Elector
	runs atomic.Int64
}

func startReplica(t *testing.T, e *election.Election, g func(*election.Elector) gocron.Elector) *replica {
	t.Helper()
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 300 * time.Millisecond, ShutdownTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{el: el}
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(g(el)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewJob(gocron.DurationJob(50*time.Millisecond), gocron.NewTask(func() { r.runs.Add(1) })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	s.Start()
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOnlyTheLeaderRuns: two schedulers (as on two replicas) run the same
// job; only the leader's runs. After it resigns, the other's runs and its
// own stop. With each form of the adapter, on each database.
func TestOnlyTheLeaderRuns(t *testing.T) {
	forms := map[string]func(e *election.Election) func(*election.Elector) gocron.Elector{
		"New": func(*election.Election) func(*election.Elector) gocron.Elector {
			return func(el *election.Elector) gocron.Elector { return sqlelectgocron.New(el) }
		},
		"ForCandidate": func(e *election.Election) func(*election.Elector) gocron.Elector {
			return func(el *election.Elector) gocron.Elector { return sqlelectgocron.ForCandidate(e, el.ID()) }
		},
	}
	for name, dsn := range targets(t) {
		for form, adapter := range forms {
			t.Run(name+"/"+form, func(t *testing.T) {
				db := open(t, dsn)
				var b [6]byte
				_, _ = rand.Read(b[:])
				ns := strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b[:])
				e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(3*time.Second), election.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				first := startReplica(t, e, adapter(e))
				waitFor(t, "the first replica to lead", first.el.IsLeader)
				second := startReplica(t, e, adapter(e))
				waitFor(t, "the second replica to follow", func() bool { return second.el.Observed().HeldBy(first.el.ID()) })
				base := first.runs.Load()
				waitFor(t, "the leader's job to run", func() bool { return first.runs.Load() >= base+5 })
				if n := second.runs.Load(); n != 0 {
					t.Fatalf("the follower's job ran %d times", n)
				}

				if err := first.el.Resign(context.Background()); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the second replica to lead", second.el.IsLeader)
				waitFor(t, "the new leader's job to run", func() bool { return second.runs.Load() >= 5 })
				// The first replica may have run once more between its
				// last check and the resignation; after that, never.
				stopped := first.runs.Load()
				time.Sleep(300 * time.Millisecond)
				if n := first.runs.Load(); n != stopped {
					t.Fatalf("the resigned replica's job ran %d more times", n-stopped)
				}
			})
		}
	}
}

func TestIsLeaderError(t *testing.T) {
	db := open(t, "")
	e, err := election.New(db, election.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []gocron.Elector{sqlelectgocron.New(el), sqlelectgocron.ForCandidate(e, el.ID())} {
		if err := g.IsLeader(context.Background()); !errors.Is(err, election.ErrNotLeader) {
			t.Errorf("%T: IsLeader of a candidate that never ran = %v, want ErrNotLeader", g, err)
		}
	}
}
