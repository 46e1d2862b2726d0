package election

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// TestGroupWakeAnyRunsOneRound: a wake-up that names no namespace (a MySQL
// listener interrupted by another process, a listener that reconnected)
// makes a Group that follows every one of its namespaces run one round,
// the same few round trips however many namespaces, instead of an attempt
// on each seat, which would lock the live seats of the leader.
func TestGroupWakeAnyRunsOneRound(t *testing.T) {
	const n = 16
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn := tg.DSN
			if tg.Name == "sqlite" {
				dsn = "sqlite:" + filepath.Join(t.TempDir(), "wakeany.db")
			}
			c := &rtcount.Counter{}
			db, err := session.OpenWrapped(dsn, c.Wrap)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { testdb.Close(db) })
			ctx := electorCtx(t)
			if err := migrate.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
			nss := make([]string, n)
			prefix := uuid.NewString()[:8]
			for i := range nss {
				nss[i] = prefix + "-" + string(rune('a'+i))
			}

			leader, err := NewGroup(ctx, testdb.OpenDSN(t, dsn), uuid.New(), GroupConfig{Namespaces: nss, Interval: 100 * time.Millisecond}, WithLogger(silent))
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(t, ctx, leader)
			for deadline := time.Now().Add(30 * time.Second); len(leader.Leading()) != n; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the leader leads %d of %d namespaces after 30 s", len(leader.Leading()), n)
				}
			}

			// Rounds far apart: only the wake-up runs one in the window.
			rounds := make(chan struct{}, 16)
			g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss, Interval: 20 * time.Second}, WithLogger(silent))
			if err != nil {
				t.Fatal(err)
			}
			g.hooks.round = func(roundReport) {
				select {
				case rounds <- struct{}{}:
				default:
				}
			}
			runUntilCleanup(t, ctx, g)
			select {
			case <-rounds:
			case <-time.After(30 * time.Second):
				t.Fatal("no first round")
			}
			// Let the first round's attempts on free seats, if any, end.
			time.Sleep(200 * time.Millisecond)
			if got := len(g.Leading()); got != 0 {
				t.Fatalf("the follower leads %d namespaces", got)
			}

			before := c.Snapshot()
			k := g.members[nss[0]].m.e.hubKey()
			handoff.WakeAll(k.Pool, k.Schema)
			select {
			case <-rounds:
			case <-time.After(10 * time.Second):
				t.Fatal("the wake-up ran no round")
			}
			time.Sleep(200 * time.Millisecond) // anything else it started
			if rt := c.Snapshot().Sub(before).Total(); rt >= n {
				t.Errorf("a wake-up that names no namespace cost %d round trips in %d namespaces, want one round's", rt, n)
			}
			if got := len(leader.Leading()); got != n {
				t.Errorf("the leader leads %d of %d namespaces after the wake-up", got, n)
			}
		})
	}
}
