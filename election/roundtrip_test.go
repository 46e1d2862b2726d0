package election_test

import (
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// openCounted opens target's database through session.OpenWrapped with a
// round-trip counter, migrates it, and limits the pool to one connection so
// calls run one after another on the same connection. SQLite gets a new
// file.
func openCounted(tb testing.TB, tg testdb.Target) (*gorm.DB, *rtcount.Counter) {
	tb.Helper()
	db, c, _ := openCountedDSN(tb, tg)
	return db, c
}

// Round-trip budgets of Elect (see docs/performance.md).
const (
	// a first acquisition on a new namespace by a new Election: an
	// unlocked read of the seat (a new candidate usually finds it held,
	// and must not lock it then); then begin, read and lock the seat,
	// refresh the candidate, create the seat, record the term in the
	// history, commit
	maxFirstRoundTrips = 7
)

// budget is the most round trips of one call: on PostgreSQL, which runs
// some calls as one statement, and on the other databases.
type budget struct{ postgres, others int64 }

func (b budget) of(tg testdb.Target) int64 {
	if tg.Name == "postgres" {
		return b.postgres
	}
	return b.others
}

var (
	// takeoverRoundTrips: a takeover of a lapsed lease is the first
	// acquisition's 6, with the grant in place of the insert, and the old
	// term's end in the history (the new leader prunes later, on a
	// renewal); on PostgreSQL one statement (TakeSeat) does all of it,
	// after the unlocked read a candidate that last saw another's lease
	// makes first.
	takeoverRoundTrips = budget{postgres: 2, others: 7}
	// handoffRoundTrips: taking a seat its leader vacated is begin, read
	// and lock the seat, refresh the candidate, grant the seat, record the
	// term, commit; on PostgreSQL one statement, after an unlocked read
	// when the candidate last saw the leader's lease (a candidate woken by
	// the handoff goes straight to it).
	handoffRoundTrips = budget{postgres: 2, others: 6}
	// vacateRoundTrips: a leader's UnregisterCandidate is begin, the
	// seat's clearing, the row's deletion, the term's end, the
	// notification where it is a statement (MySQL), commit; on PostgreSQL
	// one statement does all of it.
	vacateRoundTrips = budget{postgres: 1, others: 6}
)

// renewRoundTrips is the exact number of round trips of a renewal by the
// leader through the same Election: one guarded statement that also
// refreshes the candidate row on PostgreSQL and MySQL; the two statements
// on SQLite. It writes nothing to the history.
func renewRoundTrips(tg testdb.Target) int {
	if tg.Name == "sqlite" {
		return 2
	}
	return 1
}

// TestRoundTripElect counts the round trips of Elect's first acquisition and
// of a renewal on every database, so that an extra statement on these paths
// fails here rather than only showing in a benchmark.
func TestRoundTripElect(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db, c := openCounted(t, tg)
			e := mustElection(t, db, testdb.Namespace(t))
			id := uuid.New()
			// The Election's first call outside a transaction prepares its
			// statements where that pays (SQLite): once per Election, not
			// per call, so it is left out of the count.
			if _, err := e.ListCandidates(ctx); err != nil {
				t.Fatalf("ListCandidates: %v", err)
			}

			before := c.Snapshot()
			first, err := e.Elect(ctx, id)
			if err != nil {
				t.Fatalf("first Elect: %v", err)
			}
			n := c.Snapshot().Sub(before)
			if !first.HeldBy(id) || first.Term != 1 {
				t.Fatalf("first Elect gave %+v, want %s leading in term 1", first, id)
			}
			if n.Total() > maxFirstRoundTrips {
				t.Errorf("first acquisition made %d round trips (%v), want at most %d", n.Total(), n, maxFirstRoundTrips)
			}
			t.Logf("first acquisition: %d round trips (%v)", n.Total(), n)

			// The first renewal also prunes expired candidates, which the
			// leader does at most every five expiry windows; the renewals
			// after it are the steady state.
			if _, err := e.Elect(ctx, id); err != nil {
				t.Fatalf("first renewal: %v", err)
			}
			for i := 0; i < 3; i++ {
				before = c.Snapshot()
				renewed, err := e.Elect(ctx, id)
				if err != nil {
					t.Fatalf("renewal: %v", err)
				}
				n = c.Snapshot().Sub(before)
				if !renewed.HeldBy(id) || renewed.Term != first.Term || renewed.ExpiresAt.Before(first.ExpiresAt) {
					// Not Before rather than After: SQLite's clock ticks in
					// milliseconds.
					t.Fatalf("renewal gave %+v after %+v, want the same term, expiring no earlier", renewed, first)
				}
				if want := renewRoundTrips(tg); n.Total() != int64(want) {
					t.Errorf("renewal made %d round trips (%v), want %d", n.Total(), n, want)
				}
			}
			t.Logf("renewal: %d round trips (%v)", n.Total(), n)

			// A takeover after expiry also records the old term's end.
			short := mustElection(t, db, testdb.Namespace(t), election.WithExpire(shortExpire))
			old := uuid.New()
			if _, err := short.Elect(ctx, old); err != nil {
				t.Fatalf("Elect: %v", err)
			}
			waitSeatVacant(t, ctx, short)
			before = c.Snapshot()
			taken, err := short.Elect(ctx, id)
			if err != nil {
				t.Fatalf("takeover: %v", err)
			}
			n = c.Snapshot().Sub(before)
			if !taken.HeldBy(id) || taken.Term != 2 {
				t.Fatalf("takeover gave %+v, want %s in term 2", taken, id)
			}
			if want := takeoverRoundTrips.of(tg); n.Total() > want {
				t.Errorf("takeover made %d round trips (%v), want at most %d", n.Total(), n, want)
			}
			t.Logf("takeover after expiry: %d round trips (%v)", n.Total(), n)

			// A handoff: the leader vacates the seat, which is taken by the
			// candidate it wakes.
			before = c.Snapshot()
			if err := short.UnregisterCandidate(ctx, id); err != nil {
				t.Fatalf("UnregisterCandidate: %v", err)
			}
			n = c.Snapshot().Sub(before)
			if want := vacateRoundTrips.of(tg); n.Total() > want {
				t.Errorf("vacating the seat made %d round trips (%v), want at most %d", n.Total(), n, want)
			}
			t.Logf("vacating the seat: %d round trips (%v)", n.Total(), n)
			next := uuid.New()
			before = c.Snapshot()
			handed, err := short.Elect(ctx, next)
			if err != nil {
				t.Fatalf("Elect after the handoff: %v", err)
			}
			n = c.Snapshot().Sub(before)
			if !handed.HeldBy(next) || handed.Term != 3 {
				t.Fatalf("Elect after the handoff gave %+v, want %s in term 3", handed, next)
			}
			if want := handoffRoundTrips.of(tg); n.Total() > want {
				t.Errorf("taking a vacated seat made %d round trips (%v), want at most %d", n.Total(), n, want)
			}
			t.Logf("taking a vacated seat: %d round trips (%v)", n.Total(), n)
		})
	}
}
