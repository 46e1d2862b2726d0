package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// snapshotObserver takes a round-trip count after each renewal round.
type snapshotObserver struct {
	election.NopObserver
	c     *rtcount.Counter
	snaps chan rtcount.Counts
}

func (o *snapshotObserver) Attempt(a election.Attempt) {
	if a.Outcome == election.OutcomeRenewed {
		select {
		case o.snaps <- o.c.Snapshot():
		default:
		}
	}
}

// TestRoundTripRenewalWithObserver: with an Observer set, an Elector's
// renewal rounds make no more round trips than Elect's renewal budget: the
// Observer is told what the round learnt, and never reads the database.
// The leader renews every third of its 900 ms expiry window and prunes on
// its first renewal and then every five windows, after the renewals
// counted here.
func TestRoundTripRenewalWithObserver(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db, c := openCounted(t, tg)
			want := renewRoundTrips.of(t, tg, db)
			obs := &snapshotObserver{c: c, snaps: make(chan rtcount.Counts, 1000)}
			e := mustElection(t, db, testdb.Namespace(t), election.WithObserver(obs), election.WithExpire(900*time.Millisecond))
			el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- el.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			next := func() rtcount.Counts {
				select {
				case s := <-obs.snaps:
					return s
				case <-time.After(30 * time.Second):
					t.Fatal("no renewal round")
					return rtcount.Counts{}
				}
			}
			next() // the first renewal also prunes expired candidates
			prev := next()
			for i := 0; i < 4; i++ {
				s := next()
				if n := s.Sub(prev); n.Total() != want {
					t.Errorf("renewal round with an Observer made %d round trips (%v), want %d", n.Total(), n, want)
				}
				prev = s
			}
		})
	}
}
