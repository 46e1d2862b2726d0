package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// The namespaces of the two subsystems. One database holds both elections;
// each has its own leader and its own terms.
const (
	schedulerNS = "worker-pool.scheduler"
	reaperNS    = "worker-pool.reaper"
)

// app is what the members of one process share: the database handle and
// one Election per namespace (an Election is safe for concurrent use and
// serves any number of candidates).
type app struct {
	o         options
	db        *gorm.DB
	where     string
	tl        *timeline
	jobs      *queue
	scheduler *election.Election
	reaper    *election.Election
	metrics   *metrics // what -http serves at /metrics
	health    health   // and at /healthz
}

// openApp opens the database, creates the election tables (migrate.Up) and
// the example's own table, and binds the two elections.
func openApp(ctx context.Context, o options, tl *timeline) (*app, error) {
	db, err := session.Open(o.dsn, &gorm.Config{
		Logger:  logger.Discard,
		NowFunc: func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, err
	}
	a := &app{o: o, db: db, where: describe(db, o.dsn), tl: tl, metrics: newMetrics()}
	if err := a.setUp(ctx); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *app) setUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, a.db); err != nil {
		return err
	}
	var err error
	if a.jobs, err = newQueue(ctx, a.db); err != nil {
		return err
	}
	log := libLogger(a.o.logs)
	// Every candidate row and term carries this process's hostname and
	// pid, and the label, so that an operator can tell who leads.
	common := []election.Option{election.WithExpire(a.o.expire), election.WithLogger(log), election.WithLabel(a.o.label), election.WithObserver(a.metrics)}
	if a.scheduler, err = election.New(a.db, append(common, election.WithNamespace(schedulerNS))...); err != nil {
		return err
	}
	if a.reaper, err = election.New(a.db, append(common, election.WithNamespace(reaperNS))...); err != nil {
		return err
	}
	return nil
}

// printHistory prints the latest terms of both subsystems as the database
// keeps them (election_history): who led, from when to when, and how each
// term ended.
func (a *app) printHistory(ctx context.Context) {
	for _, s := range []struct {
		name string
		e    *election.Election
	}{{"scheduler", a.scheduler}, {"reaper", a.reaper}} {
		terms, err := s.e.History(ctx, 5)
		if err != nil {
			a.tl.note("history of %s: %v", s.name, err)
			continue
		}
		a.tl.history(s.name, terms)
	}
}

func (a *app) close() {
	if sqlDB, err := a.db.DB(); err == nil {
		sqlDB.Close()
	}
}

// newMember makes a member with a new candidate id. Its name in the
// timeline is name, or the id's first eight hex digits, which is also how
// the other processes show it.
func (a *app) newMember(name string) *member {
	id := uuid.New()
	if name == "" {
		name = shortID(id)
	}
	a.tl.name(id, name)
	return &member{app: a, id: id, name: name}
}

func shortID(id uuid.UUID) string { return id.String()[:8] }

// describe names the database for the timeline, without any password.
func describe(db *gorm.DB, dsn string) string {
	name := db.Dialector.Name()
	if name == "sqlite" {
		path := dsn
		for _, p := range []string{"sqlite://", "sqlite3:", "sqlite:", "file:"} {
			if len(path) >= len(p) && strings.EqualFold(path[:len(p)], p) {
				path = path[len(p):]
				break
			}
		}
		path, _, _ = strings.Cut(path, "?")
		return fmt.Sprintf("sqlite file %s", path)
	}
	return name
}
