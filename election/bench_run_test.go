package election_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// BenchmarkRunToLeading measures an Elector from Run to OnStartedLeading on
// a free seat: the time (ns/op, with p50 and p99 as metrics) and the round
// trips it took. "alone" is the first Elector on its pool, which on
// PostgreSQL opens the pool's LISTEN connection; "beside" starts it while
// another Elector on the pool (in another namespace) keeps that connection
// open, as in a process that already runs one. Each iteration ends with the
// Elector stopped, which is left out of the time and the count.
//
//	go test -run '^$' -bench RunToLeading -benchtime 200x ./election/
func BenchmarkRunToLeading(b *testing.B) {
	for _, tg := range testdb.Targets(b) {
		b.Run(tg.Name, func(b *testing.B) {
			b.Run("alone", func(b *testing.B) { runToLeading(b, tg, false) })
			b.Run("beside", func(b *testing.B) { runToLeading(b, tg, true) })
		})
	}
}

func runToLeading(b *testing.B, tg testdb.Target, beside bool) {
	db, c := openCounted(b, tg)
	prefix := fmt.Sprintf("bench.run.%s.", uuid.NewString()[:8])
	b.Cleanup(func() { deleteNamespaces(db, prefix) })
	if beside {
		e := mustElection(b, db, prefix+"beside", election.WithExpire(10*time.Second))
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		b.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				b.Errorf("the other Elector's Run: %v", err)
			}
		})
	}

	times := make([]time.Duration, 0, b.N)
	var rt time.Duration
	var trips rtcount.Counts
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := mustElection(b, db, fmt.Sprintf("%s%d", prefix, i), election.WithExpire(10*time.Second))
		leading := make(chan struct{})
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{
			OnStartedLeading: func(context.Context, election.Lease) { close(leading) },
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		before := c.Snapshot()
		start := time.Now()
		go func() { done <- el.Run(ctx) }()
		select {
		case <-leading:
		case err := <-done:
			b.Fatalf("Run returned before leading: %v", err)
		case <-time.After(30 * time.Second):
			b.Fatal("not leading after 30s on a free seat")
		}
		d := time.Since(start)
		trips = addCounts(trips, c.Snapshot().Sub(before))
		times = append(times, d)
		rt += d

		cancel()
		if err := <-done; err != nil {
			b.Fatalf("Run: %v", err)
		}
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(rt.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e6, "p50-ms")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1e6, "p99-ms")
	b.ReportMetric(float64(trips.Total())/float64(b.N), "roundtrips/op")
}

// deleteNamespaces deletes the rows of the namespaces that begin with
// prefix; the tables stay, as other tests share them.
func deleteNamespaces(db *gorm.DB, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, table := range []string{"election_candidates", "election_leaders", "election_history"} {
		db.WithContext(ctx).Exec("DELETE FROM "+table+" WHERE namespace LIKE ?", prefix+"%")
	}
}

// BenchmarkIdleLeader measures what a leader with nothing else to do costs
// the database: round trips per second while an Elector and a Group over
// one namespace hold their seat, with a TTL of 2 s and the default
// interval (667 ms), then a followers' interval of 200 ms, which a leader
// does not renew by. Each iteration is a third of the TTL.
//
//	go test -run '^$' -bench IdleLeader -benchtime 15x ./election/
func BenchmarkIdleLeader(b *testing.B) {
	const ttl = 2 * time.Second
	for _, tg := range testdb.Targets(b) {
		b.Run(tg.Name, func(b *testing.B) {
			for _, run := range []struct {
				kind     string
				interval time.Duration
			}{{"Elector", 0}, {"Group", 0}, {"Elector", 200 * time.Millisecond}, {"Group", 200 * time.Millisecond}} {
				kind, interval := run.kind, run.interval
				name := kind
				if interval > 0 {
					name += "/interval=" + interval.String()
				}
				b.Run(name, func(b *testing.B) {
					db, c := openCounted(b, tg)
					prefix := fmt.Sprintf("bench.idle.%s.", uuid.NewString()[:8])
					b.Cleanup(func() { deleteNamespaces(db, prefix) })
					leading := make(chan struct{})
					var once sync.Once
					started := func(context.Context, election.Lease) { once.Do(func() { close(leading) }) }
					var run func(context.Context) error
					if kind == "Elector" {
						e := mustElection(b, db, prefix+"ns", election.WithExpire(ttl))
						el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval, OnStartedLeading: started})
						if err != nil {
							b.Fatal(err)
						}
						run = el.Run
					} else {
						g, err := election.NewGroup(context.Background(), db, uuid.New(), election.GroupConfig{
							Namespaces:       []string{prefix + "ns"},
							Interval:         interval,
							OnStartedLeading: started,
						}, election.WithExpire(ttl), election.WithLogger(quiet))
						if err != nil {
							b.Fatal(err)
						}
						run = g.Run
					}
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan error, 1)
					go func() { done <- run(ctx) }()
					defer func() {
						cancel()
						if err := <-done; err != nil {
							b.Errorf("Run: %v", err)
						}
					}()
					select {
					case <-leading:
					case <-time.After(30 * time.Second):
						b.Fatal("not leading after 30s")
					}
					// Let the first rounds after the election pass.
					time.Sleep(ttl)
					before := c.Snapshot()
					b.ResetTimer()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						time.Sleep(ttl / 3)
					}
					elapsed := time.Since(start)
					b.StopTimer()
					n := c.Snapshot().Sub(before)
					b.ReportMetric(float64(n.Total())/elapsed.Seconds(), "roundtrips/s")
					b.Logf("%s: %v in %v", kind, n, elapsed.Round(time.Millisecond))
				})
			}
		})
	}
}
