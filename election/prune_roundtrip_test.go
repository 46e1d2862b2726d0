package election_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestRoundTripPrune pins the round trips of a prune that finds many
// expired candidate rows: on PostgreSQL and SQLite as many as one with
// none (BatchPrune deletes them in one statement, which judges each row
// again), on MySQL, MariaDB and TiDB one more per row (each deleted by its
// key). A Group's prune after a member lapsed meets hundreds of such rows;
// a statement per row made the prune the largest sender of statements
// when the database was already slow.
func TestRoundTripPrune(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db, c := openCounted(t, tg)
			ctx := testCtx(t)
			d := detected(t, db)
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns, election.WithExpire(time.Second))
			count := func() int64 {
				t.Helper()
				var n int64
				must(t, "counting rows", db.WithContext(ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE namespace = ?", ns).Scan(&n).Error)
				return n
			}
			prune := func() int64 {
				t.Helper()
				var n int
				trips := counted(t, c, func() {
					var err error
					n, err = e.Prune(ctx)
					must(t, "Prune", err)
				})
				t.Logf("a prune that deleted %d rows: %d round trips (%v)", n, trips.Total(), trips)
				return trips.Total()
			}
			prune() // the pool's first use of the statements
			idle := prune()

			const expired = 40
			long := time.Now().Add(-time.Hour)
			for range expired {
				must(t, "inserting an expired row", db.WithContext(ctx).Exec(
					"INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?)",
					ns, uuid.New(), d.TimeArg(long), d.TimeArg(long), d.TimeArg(long)).Error)
			}
			live := uuid.New()
			must(t, "RegisterCandidate", e.RegisterCandidate(ctx, live))
			got := prune()
			if left := count(); left != 1 {
				t.Fatalf("%d rows left after the prune, want the live candidate's only", left)
			}
			want := idle
			if _, _, batch := dialect.BatchPrune(d, []string{ns}, -time.Second); !batch {
				want += expired
			}
			if got != want {
				t.Errorf("a prune of %d expired rows made %d round trips, want %d (a prune of none made %d)", expired, got, want, idle)
			}
		})
	}
}
