package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupTakesThroughSlowRounds: where a round and a batch take are a
// statement each (PostgreSQL, MariaDB), a Group whose every round is slow
// (past slowRound) but answers well within heavyRound still takes the
// free seats, one batch take a round. Before, every such round shed its
// attempts: at 40,000 namespaces x 16 processes on two cores, whose rounds
// renewing 2,400 seats were rarely under slowRound, a crashed process's
// seats were not all led 20 s later.
func TestGroupTakesThroughSlowRounds(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "sqlite" {
			continue // one Elect an attempt: slow rounds shed them
		}
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.OpenDSN(t, tg.DSN)
			ctx := electorCtx(t)
			nss := make([]string, 6)
			for i := range nss {
				nss[i] = testdb.Namespace(t)
			}
			const expire = 2 * time.Second
			g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss}, WithExpire(expire), WithLogger(silent))
			if err != nil {
				t.Fatal(err)
			}
			if !dialect.TakesSeatsAtOnce(g.base.d) {
				t.Skipf("%s takes one seat a statement: slow rounds shed the attempts", tg.Name)
			}
			slow, heavy := g.t.slowRound(), g.t.heavyRound()
			delay := (slow + heavy) / 2 // every call: the rounds' and the takes'
			var slowRounds atomic.Int32
			g.hooks.call = func(ctx context.Context) error {
				select {
				case <-time.After(delay):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			g.hooks.round = func(rr roundReport) {
				if rr.err == nil {
					slowRounds.Add(1)
				}
			}
			runUntilCleanup(t, ctx, g)
			deadline := time.Now().Add(10 * expire)
			for len(g.Leading()) < len(nss) {
				if time.Now().After(deadline) {
					t.Fatalf("after %v of rounds slowed by %v (slowRound %v, heavyRound %v), the Group leads %d of %d namespaces (%d rounds)",
						10*expire, delay, slow, heavy, len(g.Leading()), len(nss), slowRounds.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
