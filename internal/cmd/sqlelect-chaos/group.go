package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
)

// childGroups is child with -group: c.electors Groups, each a candidate in
// every namespace, in place of the Electors. The leader work, the fenced
// writes, the bystanders and the faults are the same; SIGUSR1 makes one
// Group leave a namespace it leads and join it again (its graceful
// handover), since a Group has no Resign.
func childGroups(ctx context.Context, stopAll context.CancelFunc, db *gorm.DB, c childConfig, sigs <-chan os.Signal, out *emitter,
	dbNow func() time.Time, logger *slog.Logger, elections *atomic.Int64) error {
	fences := map[string]*electiontest.Fence{}
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
		fences[ns] = fence
		go watch(ctx, e, fmt.Sprintf("%s/%s/watch", c.name, ns), c.interval, out)
	}
	var (
		shutting atomic.Bool
		runs     sync.WaitGroup
		groups   []*election.Group
	)
	for range c.electors {
		var g *election.Group
		id := uuid.New()
		base := fmt.Sprintf("%s/group/%s", c.name, id.String()[:8])
		cfg := election.GroupConfig{
			Namespaces:      c.namespaces,
			Interval:        c.interval,
			ShutdownTimeout: 5 * time.Second,
			OnStartedLeading: func(ctx context.Context, l election.Lease) {
				out.emit(event{Kind: "obs", Observer: base + "/" + l.Namespace + "/start", Lease: &l}, false)
				cur := func() election.Lease {
					now, _ := g.Lease(l.Namespace)
					return now
				}
				lead(ctx, cur, fences[l.Namespace], l, base+"/"+l.Namespace+"/work", c, out)
			},
			OnStoppedLeading: func(l election.Lease) {
				if shutting.Load() {
					giveUp(out, base+"/"+l.Namespace+"/stop", l, true)
				}
			},
		}
		var err error
		if stopped := retryUntil(ctx, c.until, sigs, "making a Group", func() error {
			g, err = election.NewGroup(ctx, db, id, cfg, election.WithExpire(c.expire), election.WithLogger(logger))
			return err
		}); stopped != nil {
			return ignoreStop(stopped)
		}
		groups = append(groups, g)
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := g.Run(ctx); err != nil {
				out.emit(event{Kind: "err", Msg: "Group.Run: " + err.Error()}, true)
			}
		}()
	}
	out.emit(event{Kind: "ready"}, true)

	leaveCtx, cancelLeaves := context.WithCancel(ctx)
	defer cancelLeaves()
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			out.emit(event{Kind: "count", Elections: elections.Load()}, true)
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				go handOverOne(leaveCtx, groups, dbNow, out)
				continue
			}
			// Graceful stop: what each Group leads, and whatever it may
			// hold unknowingly, is recorded as given up before Run
			// vacates and unregisters.
			shutting.Store(true)
			from := dbNow()
			for _, g := range groups {
				for _, ns := range g.Leading() {
					if l, ok := g.Lease(ns); ok {
						giveUp(out, fmt.Sprintf("%s/group/%s/%s/stop", c.name, g.ID().String()[:8], ns), l, false)
					}
				}
				for _, ns := range c.namespaces {
					out.emit(event{Kind: "relwin", Release: &electiontest.Release{Namespace: ns, Candidate: g.ID(), From: from}}, false)
				}
			}
			out.flush()
			cancelLeaves()
			stopAll()
			runs.Wait()
			out.emit(event{Kind: "count", Elections: elections.Load()}, true)
			return nil
		}
	}
}

// handOverOne makes a Group that leads a namespace leave it and join it
// again, after recording what it gives up.
func handOverOne(ctx context.Context, groups []*election.Group, dbNow func() time.Time, out *emitter) {
	for _, i := range rand.Perm(len(groups)) {
		g := groups[i]
		leading := g.Leading()
		if len(leading) == 0 {
			continue
		}
		ns := leading[rand.IntN(len(leading))]
		from := dbNow()
		if from.IsZero() {
			return
		}
		if l, ok := g.Lease(ns); ok {
			giveUp(out, g.ID().String()[:8]+"/"+ns+"/leave", l, false)
		}
		key := g.ID().String() + "@" + ns + "@" + from.Format(time.RFC3339Nano)
		win := electiontest.Release{Namespace: ns, Candidate: g.ID(), From: from, To: from.Add(5 * time.Second)}
		out.emit(event{Kind: "relwin", Observer: key, Release: &win}, true)
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.Leave(lctx, ns)
		cancel()
		if err != nil && !transient(err) && ctx.Err() == nil {
			out.emit(event{Kind: "err", Msg: "Leave: " + err.Error()}, true)
		}
		if to := dbNow(); !to.IsZero() && to.Before(win.To) {
			win.To = to
			out.emit(event{Kind: "relwin", Observer: key, Release: &win}, true)
		}
		if ctx.Err() == nil {
			if err := g.Join(ns); err != nil {
				out.emit(event{Kind: "err", Msg: "Join: " + err.Error()}, true)
			}
		}
		return
	}
}

// giveUp records l, a lease a Group leads, as seen held (a Group leads a
// term before the OnStartedLeading that reports it runs, and it never
// runs when the leadership ends first) and then as given up.
func giveUp(out *emitter, observer string, l election.Lease, flush bool) {
	out.emit(event{Kind: "obs", Observer: observer, Lease: &l}, false)
	out.emit(event{Kind: "rel", Lease: &l}, flush)
}
