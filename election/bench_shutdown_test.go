package election_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// BenchmarkGroupShutdown measures a Group's graceful end: from the
// cancellation of Run, with every one of its namespaces led, until Run has
// returned, every seat vacated (and the other candidates woken) and every
// candidate row deleted. ns/op is that time; p50-ms and p99-ms are its
// percentiles over the iterations.
//
//	go test -run '^$' -bench GroupShutdown -benchtime 10x ./election/
func BenchmarkGroupShutdown(b *testing.B) {
	for _, tg := range testdb.Targets(b) {
		b.Run(tg.Name, func(b *testing.B) {
			for _, n := range []int{16, 128} {
				b.Run(fmt.Sprintf("namespaces=%d", n), func(b *testing.B) { groupShutdown(b, tg, n) })
			}
		})
	}
}

func groupShutdown(b *testing.B, tg testdb.Target, n int) {
	db := testdb.Open(b, tg)
	prefix := fmt.Sprintf("bench.shutdown.%s.", uuid.NewString()[:8])
	b.Cleanup(func() { deleteNamespaces(db, prefix) })
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		led := make(chan struct{}, n)
		g, err := election.NewGroup(context.Background(), db, uuid.New(), election.GroupConfig{
			Namespaces: names,
			OnStartedLeading: func(ctx context.Context, _ election.Lease) {
				led <- struct{}{}
				<-ctx.Done()
			},
		}, election.WithLogger(quiet), election.WithExpire(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		deadline := time.After(time.Minute)
		for range n {
			select {
			case <-led:
			case err := <-done:
				b.Fatalf("Run returned before leading every namespace: %v", err)
			case <-deadline:
				b.Fatalf("not every namespace led within a minute")
			}
		}
		b.StartTimer()
		start := time.Now()
		cancel()
		if err := <-done; err != nil {
			b.Fatalf("Run: %v", err)
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		var held int64
		if err := db.Raw("SELECT COUNT(*) FROM election_leaders WHERE namespace LIKE ? AND leader_id IS NOT NULL", prefix+"%").Scan(&held).Error; err != nil {
			b.Fatal(err)
		}
		if held != 0 {
			b.Fatalf("%d seats still held after Run returned", held)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(times)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(times[len(times)/2]), "p50-ms")
	b.ReportMetric(ms(times[(len(times)*99)/100]), "p99-ms")
}
