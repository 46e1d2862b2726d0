package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
)

// shardNamespaces are the namespaces of -namespaces: one per shard of the
// work, worker-pool.shard.000 and on.
func shardNamespaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("worker-pool.shard.%03d", i)
	}
	return out
}

// runShards takes part, as candidate id, in every shard's election with one
// election.Group until ctx ends: one statement per round for the heartbeats
// of all shards, one for the renewals, one to read the seats, whatever their
// number. Balance spreads the shards over the members. A shard's leader
// confirms its lease with Guard in a transaction every reap interval, which
// is where a real shard owner would write. The timeline shows how many
// shards the member leads when that changes.
func (m *member) runShards(ctx context.Context, id uuid.UUID) error {
	// The count changes and is reported under one lock: shards that stop
	// together (at shutdown, on a handover) report from their own
	// goroutines, and the timeline must show the counts in the order they
	// were reached.
	var (
		mu      sync.Mutex
		leading int
	)
	report := func(delta int) {
		mu.Lock()
		defer mu.Unlock()
		leading += delta
		m.tl.event(id, "shards", "leads %d of %d shards", leading, m.o.namespaces)
	}
	g, err := election.NewGroup(ctx, m.db, id, election.GroupConfig{
		Namespaces: shardNamespaces(m.o.namespaces),
		Balance:    true,
		OnStartedLeading: func(ctx context.Context, lease election.Lease) {
			report(1)
			defer report(-1)
			m.ownShard(ctx, lease)
		},
	}, election.WithExpire(m.o.expire), election.WithLabel(m.o.label), election.WithLogger(libLogger(m.o.logs)))
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// ownShard is a shard leader's work: a guarded transaction every reap
// interval until the lease is lost.
func (m *member) ownShard(ctx context.Context, lease election.Lease) {
	e, err := election.New(m.db, election.WithNamespace(lease.Namespace), election.WithExpire(m.o.expire), election.WithLogger(libLogger(m.o.logs)))
	if err != nil {
		return
	}
	tick := time.NewTicker(m.o.reap)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := m.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return e.Guard(ctx, lease, election.WithTx(tx))
		})
		if err != nil {
			return
		}
	}
}
