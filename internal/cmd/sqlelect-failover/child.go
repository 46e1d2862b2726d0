package main

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/session"
)

// The parent hands a child its settings in the environment, so that a
// password in the DSN does not show in the process list.
const (
	envDSN      = "SQLELECT_FAILOVER_DSN"
	envNS       = "SQLELECT_FAILOVER_NAMESPACE"
	envID       = "SQLELECT_FAILOVER_ID"
	envExpire   = "SQLELECT_FAILOVER_EXPIRE"
	envInterval = "SQLELECT_FAILOVER_INTERVAL"
	envTrace    = "SQLELECT_FAILOVER_TRACE"
)

// Lines a child writes to stdout, one per event, as it happens:
//
//	SEEN <leader id or 00000000-...> <term>   OnNewLeader
//	LEAD <term>                              OnStartedLeading
//	STOP <term>                              OnStoppedLeading
//	EXIT                                     Run has returned
//
// and, with -trace:
//
//	WAKE <source>                            Observer.HandoffWake
//	ROUND <outcome> <duration>               Observer.Attempt
//	SQL <kind> <text>                        a statement starts
//	DIAL, DIALED <error>                     a new connection
const (
	evSeen = "SEEN"
	evLead = "LEAD"
	evStop = "STOP"
	evExit = "EXIT"
)

// child runs one Elector until SIGTERM (or Ctrl-C, or the parent going
// away), and reports its events on stdout.
func child() error {
	expire, err := time.ParseDuration(os.Getenv(envExpire))
	if err != nil {
		return err
	}
	interval, err := time.ParseDuration(os.Getenv(envInterval))
	if err != nil {
		return err
	}
	id, err := uuid.Parse(os.Getenv(envID))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(ev string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		line := ev
		for _, a := range args {
			line += " " + fmt.Sprint(a)
		}
		// One write per line, unbuffered: the parent's read time is the
		// event's time.
		os.Stdout.WriteString(line + "\n")
	}
	trace := os.Getenv(envTrace) != ""
	wrap := func(c driver.Connector) driver.Connector { return c }
	if trace {
		rt := &rtcount.Counter{Observe: func(k rtcount.Kind, q string) {
			q = strings.Join(strings.Fields(q), " ")
			if len(q) > 70 {
				q = q[:70]
			}
			say("SQL", k, q)
		}}
		wrap = func(c driver.Connector) driver.Connector { return dialTracer{Connector: rt.Wrap(c), say: say} }
	}
	db, err := session.OpenWrapped(os.Getenv(envDSN), wrap, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("pid", os.Getpid())
	opts := []election.Option{election.WithNamespace(os.Getenv(envNS)), election.WithExpire(expire), election.WithLogger(log)}
	if trace {
		opts = append(opts, election.WithObserver(tracer{say: say}))
	}
	e, err := election.New(db, opts...)
	if err != nil {
		return err
	}
	el, err := e.NewElector(id, election.ElectorConfig{
		Interval: interval,
		OnStartedLeading: func(ctx context.Context, l election.Lease) {
			say(evLead, l.Term)
			<-ctx.Done()
		},
		OnStoppedLeading: func(l election.Lease) { say(evStop, l.Term) },
		OnNewLeader:      func(l election.Lease) { say(evSeen, l.Leader, l.Term) },
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		// The parent holds our stdin; when it goes away, leave.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	err = el.Run(ctx)
	say(evExit)
	return err
}

// dialTracer reports each new connection (-trace).
type dialTracer struct {
	driver.Connector
	say func(ev string, args ...any)
}

func (d dialTracer) Connect(ctx context.Context) (driver.Conn, error) {
	d.say("DIAL")
	c, err := d.Connector.Connect(ctx)
	d.say("DIALED", err)
	return c, err
}

// tracer reports the Elector's wake-ups and rounds (-trace).
type tracer struct {
	election.NopObserver
	say func(ev string, args ...any)
}

func (t tracer) HandoffWake(w election.Wake) { t.say("WAKE", w.Source) }

func (t tracer) Attempt(a election.Attempt) { t.say("ROUND", a.Outcome, a.Duration) }

// childEnv is the environment of a child process.
func childEnv(dsn, ns string, id uuid.UUID, c config) []string {
	env := os.Environ()
	if c.trace {
		env = append(env, envTrace+"=1")
	}
	return append(env,
		envDSN+"="+dsn,
		envNS+"="+ns,
		envID+"="+id.String(),
		envExpire+"="+c.expire.String(),
		envInterval+"="+c.interval.String(),
	)
}

// parseTerm reads the term field of an event line.
func parseTerm(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
