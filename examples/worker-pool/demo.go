package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
)

// runDemo runs three members in this process on one database, stops the
// scheduler's leader once jobs flow, waits for another member to take over
// in a higher term and process jobs, then stops everyone and returns.
func runDemo(ctx context.Context, o options, out io.Writer) (err error) {
	if o.dsn == "" {
		dir, err := os.MkdirTemp("", "sqlelect-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.dsn = "sqlite:" + filepath.Join(dir, "demo.db")
	}
	if o.expire == 0 {
		o.expire = 2 * time.Second
	}
	tl := newTimeline(out, false)
	a, err := openApp(ctx, o, tl)
	if err != nil {
		return err
	}
	defer a.close()

	names := []string{"ada", "bob", "cyd"}
	tl.note("demo: %s; members %s, %d workers each; expire %v", a.where, strings.Join(names, ", "), o.workers, o.expire)
	type running struct {
		m    *member
		stop context.CancelFunc
		done chan error
	}
	members := map[uuid.UUID]*running{}
	var failed []error
	stop := func(r *running) {
		r.stop()
		if err := <-r.done; err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", r.m.name, err))
		}
		delete(members, r.m.id)
	}
	defer func() {
		for _, r := range members {
			stop(r)
		}
		err = errors.Join(append([]error{err}, failed...)...)
	}()
	for _, name := range names {
		m := a.newMember(name)
		mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &running{m: m, stop: cancel, done: make(chan error, 1)}
		members[m.id] = r
		go func() { r.done <- m.run(mctx) }()
	}

	// Bounded: the demo fails rather than hangs. Ctrl-C stops it cleanly.
	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	wait := func(what string, cond func() bool) (bool, error) {
		if err := tl.wait(wctx, cond); err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("demo: gave up after %v waiting for %s", o.timeout, what)
		}
		return true, nil
	}

	// 1. A scheduler leader, and jobs flowing.
	if ok, err := wait("a scheduler leader and jobs done", func() bool {
		_, ok := tl.leaders["scheduler"]
		return ok && tl.jobs >= 5
	}); !ok {
		return err
	}
	old := tl.lease("scheduler")
	victim := members[old.Leader]
	tl.note("demo: stopping %s, the scheduler's leader (term %d); it unregisters on the way out", victim.m.name, old.Term)
	stopped := time.Now()
	stop(victim)

	// 2. Another member leads in a higher term, and jobs flow again.
	var jobsBefore int
	if ok, err := wait("a new scheduler leader", func() bool {
		l, ok := tl.leaders["scheduler"]
		jobsBefore = tl.jobs
		return ok && l.Leader != old.Leader && l.Term > old.Term
	}); !ok {
		return err
	}
	l := tl.lease("scheduler")
	tl.note("demo: %s took over the scheduler in term %d, %v after %s was told to stop", tl.nameOf(l.Leader), l.Term,
		time.Since(stopped).Round(time.Millisecond), victim.m.name)
	if ok, err := wait("jobs after the takeover", func() bool { return tl.jobs >= jobsBefore+5 }); !ok {
		return err
	}

	tl.note("demo: stopping the other members")
	for _, r := range members {
		r.stop() // all at once; stop waits for each below
	}
	for _, r := range members {
		stop(r)
	}
	tl.note("demo: the scheduler's terms, as election_history has them (times UTC, database clock):")
	a.printHistory(ctx)
	tl.note("demo: done. %s", tl.summary())
	return nil
}
