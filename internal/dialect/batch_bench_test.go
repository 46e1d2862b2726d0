package dialect_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// BenchmarkBatchRound times one Group round on PostgreSQL as the server
// and the driver see it: n namespaces with 8 live candidates each, the
// caller holding an eighth of the seats, the others held by the other
// candidates, with and without the live count Balance reads.
func BenchmarkBatchRound(b *testing.B) {
	db := testdb.Open(b, testdb.Only(b, "postgres"))
	raw := testdb.Raw(b, db)
	d, err := dialect.For(db)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{16, 128, 1000} {
		prefix := fmt.Sprintf("zz-bench-round-%s-", uuid.NewString()[:8])
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s%04d", prefix, i)
		}
		cands := make([]uuid.UUID, 8)
		for i := range cands {
			cands[i] = uuid.New()
		}
		me := cands[0]
		var held []string
		var terms []int64
		for i, ns := range names {
			leader := cands[i%len(cands)]
			if _, err := raw.ExecContext(ctx, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
				"VALUES ($1, $2, $3, clock_timestamp() + interval '1 hour', clock_timestamp(), clock_timestamp())", ns, leader, int64(i+1)); err != nil {
				b.Fatal(err)
			}
			if leader == me {
				held, terms = append(held, ns), append(terms, int64(i+1))
			}
			for _, c := range cands {
				if _, err := raw.ExecContext(ctx, "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) "+
					"VALUES ($1, $2, now(), now(), clock_timestamp() + interval '1 hour')", ns, c); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Cleanup(func() {
			for _, tbl := range []string{"election_leaders", "election_candidates"} {
				_, _ = raw.Exec("DELETE FROM "+tbl+" WHERE namespace LIKE $1", prefix+"%")
			}
		})
		if _, err := raw.ExecContext(ctx, "VACUUM ANALYZE election_leaders, election_candidates"); err != nil {
			b.Fatal(err)
		}
		for _, live := range []bool{false, true} {
			b.Run(fmt.Sprintf("namespaces=%d/live=%v", n, live), func(b *testing.B) {
				q, args := benchRound(d, names, held, terms, me, live)
				run := func() {
					rows, err := raw.QueryContext(ctx, q, args...)
					if err != nil {
						b.Fatal(err)
					}
					seats := 0
					for rows.Next() {
						seats++
					}
					if err := rows.Err(); err != nil {
						b.Fatal(err)
					}
					rows.Close()
					if seats != n {
						b.Fatalf("%d seats read, want %d", seats, n)
					}
				}
				run()
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					run()
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/round")
			})
		}
	}
}

// benchRound is the round BenchmarkBatchRound times, with its arguments:
// names' seats and heartbeats, the renewal of held in terms, as me.
func benchRound(d dialect.Dialect, names, held []string, terms []int64, me uuid.UUID, live bool) (string, []any) {
	q, _ := dialect.BatchRound(d, len(names), len(held) > 0, live)
	args := []any{d.DurationArg(time.Hour), me, "host", 1, "", dialect.TextArray(names)}
	if len(held) > 0 {
		args = append(args, dialect.TextArray(held), dialect.Int64Array(terms))
	}
	return q, args
}
