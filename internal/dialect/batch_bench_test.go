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

// BenchmarkGroupRound times one Group round on PostgreSQL as the server
// and the driver see it: n namespaces with 8 live candidates each, the
// caller holding an eighth of the seats, the others held by the other
// candidates, with and without the live count Balance reads. The round
// reads the caller's own seats (and none of the others', all live).
func BenchmarkGroupRound(b *testing.B) {
	db := testdb.Open(b, testdb.Only(b, "postgres"))
	raw := testdb.Raw(b, db)
	d, err := dialect.For(db)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{16, 128, 1000, 10000} {
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
		leaders := make([]string, n)
		for i, ns := range names {
			leaders[i] = cands[i%len(cands)].String()
			if cands[i%len(cands)] == me {
				held, terms = append(held, ns), append(terms, int64(i+1))
			}
		}
		if _, err := raw.ExecContext(ctx, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
			"SELECT ns, CAST(l AS uuid), k, clock_timestamp() + interval '1 hour', clock_timestamp(), clock_timestamp() "+
			"FROM unnest(CAST($1 AS text[]), CAST($2 AS text[])) WITH ORDINALITY AS t(ns, l, k)", dialect.TextArray(names), dialect.TextArray(leaders)); err != nil {
			b.Fatal(err)
		}
		for _, c := range cands {
			if _, err := raw.ExecContext(ctx, "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) "+
				"SELECT ns, $2, now(), now(), clock_timestamp() + interval '1 hour' FROM unnest(CAST($1 AS text[])) AS t(ns)", dialect.TextArray(names), c); err != nil {
				b.Fatal(err)
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
				in := dialect.RoundIn{Member: me, Hostname: "host", PID: 1, Expire: time.Hour, Horizon: time.Second,
					Joined: len(names), Read: held}
				for k, ns := range held {
					in.Held = append(in.Held, dialect.HeldLease{Namespace: ns, Term: terms[k]})
				}
				if live {
					in.Sample = names[:4]
				}
				conn, err := raw.Conn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				run := func() {
					out, err := dialect.GroupRound(ctx, conn, d, in)
					if err != nil {
						b.Fatal(err)
					}
					if len(out.Seats) != len(held) || len(out.Renewed) != len(held) {
						b.Fatalf("%d seats read, %d renewed; want %d", len(out.Seats), len(out.Renewed), len(held))
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

// BenchmarkTextArray: the literal of a round's namespaces, 40,000 of them.
func BenchmarkTextArray(b *testing.B) {
	names := make([]string, 40000)
	for i := range names {
		names[i] = fmt.Sprintf("scale-35a0af92.%05d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_ = dialect.TextArray(names)
	}
}
