package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupPrunes: a Group prunes the namespaces it leads, as an Elector's
// renewals do its one: a crashed candidate's rows, once expired for longer
// than the expiry window, and the terms that ended longer ago than the
// history retention; its own running term and rows stay, and a namespace
// it does not lead is left alone.
func TestGroupPrunes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		led, other := testdb.Namespace(t), testdb.Namespace(t)
		const expire = time.Second
		crashed := uuid.New()
		for _, ns := range []string{led, other} {
			e := mustElection(t, db, ns, election.WithExpire(expire))
			// Two ended terms of the crashed candidate, and its row.
			for i := 0; i < 2; i++ {
				mustElect(t, e, crashed)
				must(t, "Resign", e.Resign(ctx, crashed))
			}
			must(t, "RegisterCandidate", e.RegisterCandidate(ctx, crashed))
		}
		// other is held by a live leader the Group does not displace.
		holder := mustElection(t, db, other, election.WithExpire(time.Minute))
		keeper := uuid.New()
		mustElect(t, holder, keeper)

		rows := func(ns string, id uuid.UUID) int64 {
			var n int64
			must(t, "counting rows", db.WithContext(ctx).Raw(
				"SELECT COUNT(*) FROM election_candidates WHERE namespace = ? AND candidate_id = ?", ns, id.String()).Scan(&n).Error)
			return n
		}
		ended := func(ns string) int {
			h, err := mustElection(t, db, ns).History(ctx, 100)
			must(t, "History", err)
			n := 0
			for _, r := range h {
				if r.Ended() {
					n++
				}
			}
			return n
		}

		id := uuid.New()
		g, err := election.NewGroup(ctx, db, id, election.GroupConfig{Namespaces: []string{led, other}},
			election.WithExpire(expire), election.WithHistoryRetention(time.Second), election.WithLogger(quiet))
		must(t, "NewGroup", err)
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()

		for deadline := time.Now().Add(15 * time.Second); rows(led, crashed) != 0 || ended(led) != 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 15 s the led namespace still has %d rows of the crashed candidate and %d ended terms", rows(led, crashed), ended(led))
			}
		}
		if !g.IsLeader(led) {
			t.Fatalf("the Group does not lead %s", led)
		}
		if rows(led, id) != 1 {
			t.Fatal("the Group's own row was pruned")
		}
		h, err := mustElection(t, db, led).History(ctx, 10)
		must(t, "History", err)
		if len(h) != 1 || h[0].Leader != id || h[0].Ended() {
			t.Fatalf("history of the led namespace: %+v, want only the Group's running term", h)
		}
		if g.IsLeader(other) {
			t.Fatalf("the Group took %s from its live leader", other)
		}
		if rows(other, crashed) != 1 || ended(other) != 2 {
			t.Fatalf("the namespace the Group does not lead was pruned: %d rows, %d ended terms", rows(other, crashed), ended(other))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}
