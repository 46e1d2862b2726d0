package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// maxFollowerRoundTrips is what a follower's Elect costs while another
// candidate holds a live lease: an unlocked read of the seat and the
// refresh of its own candidate row.
const maxFollowerRoundTrips = 2

// TestFollowerDoesNotLockLiveSeat: while another candidate holds a live
// lease, a follower's Elect reads the seat without locking it and refreshes
// its own row, so it neither waits behind a transaction that holds the seat
// (a leader's renewal, a Guard, a vacate) nor makes the leader wait behind
// it. The seat row is held FOR UPDATE by a transaction of the test's own
// while the follower calls Elect.
func TestFollowerDoesNotLockLiveSeat(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			ns := testdb.Namespace(t)
			leaderDB := testdb.Open(t, tg)
			leaderE := mustElection(t, leaderDB, ns)
			leader := uuid.New()
			if l, err := leaderE.Elect(ctx, leader); err != nil || !l.HeldBy(leader) {
				t.Fatalf("leader's Elect: %+v, %v", l, err)
			}

			db, c := openCounted(t, tg)
			e := mustElection(t, db, ns)
			follower := uuid.New()
			// The first Elect learns who holds the seat.
			if l, err := e.Elect(ctx, follower); err != nil || !l.HeldBy(leader) {
				t.Fatalf("follower's first Elect: %+v, %v; want %s leading", l, err, leader)
			}

			// A transaction holds the seat row's lock, as a leader's
			// renewal or a vacate does for a moment.
			tx := leaderDB.WithContext(ctx).Begin()
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			defer tx.Rollback()
			var held int
			if err := tx.Raw("SELECT 1 FROM election_leaders WHERE namespace = ? FOR UPDATE", ns).Scan(&held).Error; err != nil || held != 1 {
				t.Fatalf("locking the seat row: %v (rows %d)", err, held)
			}

			before := c.Snapshot()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l, err := e.Elect(cctx, follower)
			if err != nil {
				t.Fatalf("follower's Elect while the seat row is locked: %v (it waited on the lock)", err)
			}
			if !l.HeldBy(leader) {
				t.Fatalf("follower's Elect gave %+v, want %s leading", l, leader)
			}
			if n := c.Snapshot().Sub(before); n.Total() > maxFollowerRoundTrips {
				t.Errorf("follower's Elect made %d round trips (%v), want at most %d", n.Total(), n, maxFollowerRoundTrips)
			}
			// It still refreshed its own candidate row.
			ids, err := e.ListCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, id := range ids {
				found = found || id == follower
			}
			if !found {
				t.Errorf("the follower is not among the live candidates %v", ids)
			}
		})
	}
}
