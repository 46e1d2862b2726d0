package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
)

// member is one participant: a candidate in both namespaces (one Elector
// each, the same candidate id) and the host of a few workers.
type member struct {
	*app
	id   uuid.UUID
	name string
}

// step is one round of a subsystem's leader-only work. It runs inside the
// transaction in which Guard has just confirmed the lease; it returns a line
// for the timeline, or "".
type step func(ctx context.Context, tx *gorm.DB) (string, error)

// subsystem is leader-only work elected in a namespace of its own.
type subsystem struct {
	name  string
	e     *election.Election
	every time.Duration
	// start is called when this member starts leading, with the lease of
	// its term; it returns the step to repeat while the term lasts.
	start func(lease election.Lease) step
}

// run takes part until ctx ends, then leaves cleanly: the workers finish
// the job in hand, then the Electors stop, which cancels leader work and
// unregisters the member from both namespaces, so another member takes over
// at once instead of after the lease expires.
func (m *member) run(ctx context.Context) error {
	// Register first: the reaper gives back the jobs of members that are not
	// live candidates, so this member must be one before a worker claims.
	if err := m.reaper.RegisterCandidate(ctx, m.id); err != nil {
		return fmt.Errorf("registering %s: %w", m.name, err)
	}
	subsystems := []subsystem{
		{name: "scheduler", e: m.scheduler, every: m.o.enqueue, start: m.enqueueJobs},
		{name: "reaper", e: m.reaper, every: m.o.reap, start: m.reapJobs},
	}
	// The Electors outlive ctx until the workers are done.
	electCtx, stopElectors := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElectors()
	var electors sync.WaitGroup
	errs := make(chan error, len(subsystems)+1)
	for _, s := range subsystems {
		el, err := s.e.NewElector(m.id, election.ElectorConfig{
			OnStartedLeading: func(ctx context.Context, lease election.Lease) { m.lead(ctx, s, lease) },
			OnStoppedLeading: func(lease election.Lease) { m.tl.stopped(m.id, s.name, lease) },
			OnNewLeader:      func(lease election.Lease) { m.tl.observed(m.id, s.name, lease, m.identity(s.e, lease)) },
		})
		if err != nil {
			stopElectors()
			electors.Wait()
			return err
		}
		hc, err := election.NewHealthCheck(el, 0)
		if err != nil {
			stopElectors()
			electors.Wait()
			return err
		}
		m.health.add(hc)
		electors.Add(1)
		go func() {
			defer electors.Done()
			if err := el.Run(electCtx); err != nil {
				errs <- fmt.Errorf("%s elector: %w", s.name, err)
			}
		}()
	}
	if m.o.namespaces > 0 {
		electors.Add(1)
		go func() {
			defer electors.Done()
			if err := m.runShards(electCtx, m.id); err != nil {
				errs <- fmt.Errorf("shards: %w", err)
			}
		}()
	}
	m.tl.event(m.id, "", "joins with %d workers", m.o.workers)

	var workers sync.WaitGroup
	for i := 1; i <= m.o.workers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			m.work(ctx, i)
		}()
	}
	workers.Wait()
	stopElectors()
	electors.Wait()
	close(errs)
	m.tl.event(m.id, "", "left: workers stopped, unregistered from both namespaces")
	var failed []error
	for err := range errs {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

// lead repeats a subsystem's step while this member leads, each time in a
// transaction that starts with Guard. Guard, given the transaction, checks
// that the lease of this term still holds and locks the leader row until
// the transaction ends: the step's writes commit only under a current
// leader, even if this process stalled and its lease ran out meanwhile.
func (m *member) lead(ctx context.Context, s subsystem, lease election.Lease) {
	m.tl.leading(m.id, s.name, lease, s.e.Identity())
	do := s.start(lease)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		var line string
		err := m.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := s.e.Guard(ctx, lease, election.WithTx(tx)); err != nil {
				return err
			}
			var err error
			line, err = do(ctx, tx)
			return err
		})
		switch {
		case ctx.Err() != nil:
			return // leadership ended; nothing was committed after that
		case errors.Is(err, election.ErrNotLeader):
			m.tl.event(m.id, s.name, "Guard refused the write: no longer leader (term %d)", lease.Term)
			return
		case err != nil:
			m.tl.event(m.id, s.name, "error (will retry): %v", err)
		case line != "":
			m.tl.event(m.id, s.name, "%s", line)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// enqueueJobs is the scheduler's leader work: one job per step, while the
// backlog is short.
func (m *member) enqueueJobs(lease election.Lease) step {
	var seq int64 // jobs of this term; only this member holds the term
	return func(ctx context.Context, tx *gorm.DB) (string, error) {
		var backlog int64
		if err := tx.Model(&Job{}).Where("status = ?", pending).Count(&backlog).Error; err != nil {
			return "", err
		}
		if backlog >= int64(2*m.o.workers) {
			return "", nil
		}
		seq++
		j := Job{ID: fmt.Sprintf("%d-%d", lease.Term, seq), Term: lease.Term, Seq: seq, Status: pending}
		if err := tx.Create(&j).Error; err != nil {
			return "", err
		}
		return "enqueued job " + j.ID, nil
	}
}

// reapJobs is the reaper's leader work: delete finished jobs, and put back
// in the queue the running jobs of members that are no longer live
// candidates (killed, or cut off for longer than the expiry window).
func (m *member) reapJobs(election.Lease) step {
	return func(ctx context.Context, tx *gorm.DB) (string, error) {
		live, err := m.reaper.ListCandidates(ctx, election.WithTx(tx))
		if err != nil {
			return "", err
		}
		ids := make([]string, len(live))
		for i, id := range live {
			ids[i] = id.String()
		}
		requeue := tx.Model(&Job{}).Where("status = ?", running)
		if len(ids) > 0 {
			requeue = requeue.Where("worker NOT IN ?", ids)
		}
		res := requeue.Updates(map[string]any{"status": pending, "worker": nil})
		if res.Error != nil {
			return "", res.Error
		}
		requeued := res.RowsAffected
		res = tx.Where("status = ?", done).Delete(&Job{})
		if res.Error != nil {
			return "", res.Error
		}
		if res.RowsAffected == 0 && requeued == 0 {
			return "", nil
		}
		return fmt.Sprintf("removed %d finished jobs, put back %d orphaned", res.RowsAffected, requeued), nil
	}
}

// work is one worker: claim a job, do it, mark it done, until ctx ends. A
// job in hand is finished before the worker stops.
func (m *member) work(ctx context.Context, n int) {
	me := m.id.String()
	idle := 100 * time.Millisecond
	for ctx.Err() == nil {
		job, ok, err := m.jobs.claim(ctx, me)
		if err != nil {
			if ctx.Err() == nil {
				m.tl.event(m.id, "", "worker %d: claim failed (retrying in 1s): %v", n, err)
			}
			sleep(ctx, time.Second)
			continue
		}
		if !ok {
			sleep(ctx, idle)
			continue
		}
		took := 50*time.Millisecond + rand.N(200*time.Millisecond)
		time.Sleep(took) // the job's work: not interrupted by shutdown
		fin, err := m.jobs.finish(context.WithoutCancel(ctx), job, me)
		switch {
		case err != nil:
			m.tl.event(m.id, "", "worker %d: finishing job %s failed: %v", n, job.ID, err)
		case !fin:
			m.tl.event(m.id, "", "worker %d: job %s was given to another worker meanwhile", n, job.ID)
		default:
			m.tl.jobDone(m.id, n, job.ID, took)
		}
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

// identity returns who holds lease, read from the database (LeaderInfo),
// or the zero Identity when it cannot tell: the seat changed since, or the
// read failed.
func (m *member) identity(e *election.Election, lease election.Lease) election.Identity {
	if lease.Vacant() || lease.Leader == m.id {
		return election.Identity{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := e.LeaderInfo(ctx)
	if err != nil || info.Lease.Leader != lease.Leader || info.Lease.Term != lease.Term {
		return election.Identity{}
	}
	return info.Identity
}
