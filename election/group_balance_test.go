package election_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// leadCounts returns how many namespaces each Group leads, and the total.
func leadCounts(runs []*groupRun) ([]int, int) {
	counts := make([]int, len(runs))
	total := 0
	for i, r := range runs {
		counts[i] = len(r.g.Leading())
		total += counts[i]
	}
	return counts, total
}

// TestGroupBalanceWakeRespectsShare: with Balance, a handoff wake does not
// let a Group at its share take the seat: of two Groups woken by a vacate,
// the one below its share takes it. Two namespaces, three Groups (share
// 1): a and b lead one each, c none; b leaves its namespace, which wakes a
// and c. a shares b's pool, so it is woken first (in process, before the
// vacate commits; c hears of it through the database, or at its next
// round); still c must take the seat, and a never leads two.
func TestGroupBalanceWakeRespectsShare(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn, db := testdb.Shared(t, tg)
			nss := groupNamespaces(t, 2)
			rec := electiontest.NewRecorder()
			cfg := election.GroupConfig{Namespaces: nss, Interval: 200 * time.Millisecond, Balance: true}
			a := startGroup(t, db, "a", rec, cfg, election.WithExpire(time.Second))
			waitUntil(t, 20*time.Second, "a alone leads both namespaces", func() bool { return len(a.g.Leading()) == 2 })
			b := startGroup(t, db, "b", rec, cfg, election.WithExpire(time.Second))
			waitUntil(t, 20*time.Second, "a hands one namespace over to b", func() bool {
				return len(a.g.Leading()) == 1 && len(b.g.Leading()) == 1
			})
			c := startGroup(t, testdb.OpenDSN(t, dsn), "c", rec, cfg, election.WithExpire(time.Second))
			// c's rows are live, written by its first round: c counts three
			// candidates, a share of one, which it is below. a, which counts
			// two or three, is at its share of one either way.
			waitUntil(t, 20*time.Second, "c is a live candidate", func() bool {
				ids, err := mustElection(t, db, nss[0]).ListCandidates(ctx)
				return err == nil && len(ids) == 3
			})
			ns := b.g.Leading()[0]
			watch, stopWatch := context.WithCancel(ctx)
			most := make(chan int, 1)
			go func() {
				n := 0
				defer func() { most <- n }()
				for watch.Err() == nil {
					n = max(n, len(a.g.Leading()))
					time.Sleep(time.Millisecond)
				}
			}()
			must(t, "b leaves", b.g.Leave(ctx, ns))
			waitUntil(t, 10*time.Second, "c takes the namespace b left", func() bool { return c.g.IsLeader(ns) })
			stopWatch()
			if n := <-most; n > 1 {
				t.Errorf("a, at its share, led %d namespaces after the wake", n)
			}
			for _, r := range []*groupRun{a, b, c} {
				must(t, "Run", r.stop())
			}
			if err := rec.Check().Err(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestGroupBalanceConverges: four Groups with Balance in twelve namespaces,
// all on one pool (every vacate wakes the others at once), settle at no
// more than their share, ceil(12/4) = 3, each, every namespace led; when
// one of them stops they settle again at ceil(12/3) = 4. Once they know one
// another, no Group leads more than its share plus one, even while they
// move, and no two terms overlap.
func TestGroupBalanceConverges(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		const m = 12
		nss := groupNamespaces(t, m)
		rec := electiontest.NewRecorder()
		cfg := election.GroupConfig{Namespaces: nss, Interval: 150 * time.Millisecond, Balance: true}
		var runs []*groupRun
		for i := range 4 {
			runs = append(runs, startGroup(t, db, fmt.Sprintf("g%d", i), rec, cfg, election.WithExpire(time.Second)))
		}
		// strict: the Groups know one another, so none may go above its
		// share plus one even while they move (at a cold start each counts
		// only the candidates whose rows it has seen).
		settle := func(groups []*groupRun, strict bool) {
			t.Helper()
			share := (m + len(groups) - 1) / len(groups)
			start := time.Now()
			waitUntil(t, 30*time.Second, fmt.Sprintf("every namespace led, none above the share %d", share), func() bool {
				counts, total := leadCounts(groups)
				for _, n := range counts {
					if strict && n > share+1 {
						t.Fatalf("a Group leads %d namespaces, above the share %d plus one (%v)", n, share, counts)
					}
					if n > share {
						return false
					}
				}
				return total == m
			})
			counts, _ := leadCounts(groups)
			t.Logf("%d Groups settled at %v (share %d) in %v", len(groups), counts, share, time.Since(start).Round(time.Millisecond))
			// Settled: five intervals more without anyone above the share
			// plus one, nor a namespace left without a leader for long.
			until := time.Now().Add(5 * cfg.Interval)
			for time.Now().Before(until) {
				counts, _ := leadCounts(groups)
				for _, n := range counts {
					if n > share+1 {
						t.Errorf("after settling, a Group leads %d namespaces (%v), share %d", n, counts, share)
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		settle(runs, false)
		must(t, "stopping one Group", runs[3].stop())
		settle(runs[:3], true)
		for _, r := range runs[:3] {
			must(t, "Run", r.stop())
		}
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupLeaseEdge: a Group following a namespace whose leader crashed
// takes the seat at the end of the lease (by the database clock), not at
// its next round after it: the lease of a candidate that stopped renewing
// ends within the interval after a round read it, and the new term begins
// well before the next round could have begun it.
func TestGroupLeaseEdge(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 1)
		const interval = 2 * time.Second
		crashed := mustElection(t, db, nss[0], election.WithExpire(2500*time.Millisecond))
		holder := uuid.New()
		held, err := crashed.Elect(ctx, holder)
		if err != nil || !held.HeldBy(holder) {
			t.Fatalf("Elect: %+v, %v", held, err)
		}
		obs := newGroupEvents("g", nil)
		g := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: interval},
			election.WithExpire(6*time.Second), election.WithObserver(obs))
		// Right after one of the Group's rounds, the holder renews a last
		// time and crashes: its lease ends 2.5 s later, after the Group's
		// next round (0.8 to 1 interval on) has read it and before the
		// round after that (at least 1.6 s later).
		_, from := obs.wait(t, 10*time.Second, "a round of the Group", 0, func(e groupEvent) bool {
			return e.kind == "attempt" && e.a.Outcome == election.OutcomeFollower
		})
		last, err := crashed.Elect(ctx, holder)
		if err != nil || !last.HeldBy(holder) {
			t.Fatalf("the holder's last renewal: %+v, %v", last, err)
		}
		started, _ := obs.wait(t, 10*time.Second, "the Group takes the seat", from, func(e groupEvent) bool { return e.kind == "started" })
		late := started.ld.Lease.AcquiredAt.Sub(last.ExpiresAt)
		if late < 0 {
			t.Fatalf("the new term began %v before the lease it replaced ended", -late)
		}
		if late > interval/4 {
			// A round slower than a quarter of the interval sheds the
			// attempts on free seats until a round is quick again, the edge's
			// too (internal/pace): on a machine that busy, the next round
			// takes the seat, by design.
			var slow time.Duration
			events := obs.since(from)
			for _, e := range events {
				if e.kind == "attempt" && e.a.Duration > interval/4 {
					slow = e.a.Duration
				}
			}
			if slow == 0 {
				t.Errorf("the Group took the seat %v after the lease ended; at the lease's edge it takes well under an interval (%v); events after the holder's last renewal: %v", late, interval, events)
			} else {
				t.Logf("a round took %v, so the Group shed the edge's attempt, by design", slow)
			}
		}
		t.Logf("taken %v after the crashed holder's lease ended", late)
		must(t, "Run", g.stop())
	})
}

// TestGroupBalanceColdStart: two balanced Groups started together over
// eight namespaces each lead their share of four, and neither ever leads
// more than share+1 on the way: in its first interval a Group takes at most
// one seat, so the first to run a round, which counts itself alone, does
// not take every seat and hand half of them over again.
func TestGroupBalanceColdStart(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			_, db := testdb.Shared(t, tg)
			nss := groupNamespaces(t, 8)
			rec := electiontest.NewRecorder()
			cfg := election.GroupConfig{Namespaces: nss, Interval: time.Second, Balance: true}
			watch, stopWatch := context.WithCancel(ctx)
			var runs [2]*groupRun
			most := make(chan [2]int, 1)
			started := make(chan struct{})
			go func() {
				var n [2]int
				defer func() { most <- n }()
				<-started
				for watch.Err() == nil {
					for i, r := range runs {
						n[i] = max(n[i], len(r.g.Leading()))
					}
					time.Sleep(time.Millisecond)
				}
			}()
			runs[0] = startGroup(t, db, "a", rec, cfg, election.WithExpire(3*time.Second))
			runs[1] = startGroup(t, db, "b", rec, cfg, election.WithExpire(3*time.Second))
			close(started)
			waitUntil(t, 30*time.Second, "each Group leads its share", func() bool {
				counts, total := leadCounts(runs[:])
				return total == len(nss) && counts[0] == 4 && counts[1] == 4
			})
			stopWatch()
			if n := <-most; n[0] > 5 || n[1] > 5 {
				t.Errorf("the Groups led at most %v namespaces on the way, want at most share+1 = 5 each", n)
			}
			for _, r := range runs {
				must(t, "Run", r.stop())
			}
			if err := rec.Check().Err(); err != nil {
				t.Error(err)
			}
		})
	}
}
