package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
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
)

// Lines a child writes to stdout, one per event, as it happens:
//
//	SEEN <leader id or 00000000-...> <term>   OnNewLeader
//	LEAD <term>                              OnStartedLeading
//	STOP <term>                              OnStoppedLeading
//	EXIT                                     Run has returned
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
	db, err := session.Open(os.Getenv(envDSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("pid", os.Getpid())
	e, err := election.New(db, election.WithNamespace(os.Getenv(envNS)), election.WithExpire(expire), election.WithLogger(log))
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

// childEnv is the environment of a child process.
func childEnv(dsn, ns string, id uuid.UUID, c config) []string {
	return append(os.Environ(),
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
