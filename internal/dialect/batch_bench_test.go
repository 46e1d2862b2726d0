package dialect_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// BenchmarkGroupRound times one Group round on PostgreSQL as the server
// and the driver see it: n namespaces with 8 live candidates each, the
// caller holding an eighth of the seats, the others held by the other
// candidates, with and without the live count Balance reads. The round
// reads the caller's own seats (and none of the others', all live).
func BenchmarkGroupRound(b *testing.B) {
	raw, d := openPostgres(b)
	ctx := context.Background()
	for _, n := range []int{16, 128, 1000, 10000, 40000} {
		names, round := seedSeats(b, raw, "zz-bench-round-", n)
		if _, err := raw.ExecContext(ctx, "VACUUM ANALYZE election_leaders, election_candidates"); err != nil {
			b.Fatal(err)
		}
		for _, live := range []bool{false, true} {
			b.Run(fmt.Sprintf("namespaces=%d/live=%v", n, live), func(b *testing.B) {
				in := round
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
					if len(out.Seats) != len(in.Held) || len(out.Renewed) != len(in.Held) {
						b.Fatalf("%d seats read, %d renewed; want %d", len(out.Seats), len(out.Renewed), len(in.Held))
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
