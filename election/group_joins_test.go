package election

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// runUntilCleanup runs g until the test ends, and then checks that Run
// returned no error.
func runUntilCleanup(t testing.TB, ctx context.Context, g *Group) {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// joinsFixture opens a migrated database of tg (SQLite in a file of the
// test's own) and a raw connection to it, and returns them with the
// candidate rows a first round writes there (dialect.FirstJoins) and
// count(first) new namespaces, in order.
func joinsFixture(t *testing.T, ctx context.Context, tg testdb.Target, count func(first int) int) (db *gorm.DB, raw *sql.DB, first int, nss []string) {
	t.Helper()
	dsn := tg.DSN
	if tg.Name == "sqlite" {
		dsn = "sqlite:" + filepath.Join(t.TempDir(), "joins.db")
	}
	db = testdb.OpenDSN(t, dsn)
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	first = dialect.FirstJoins(d)
	prefix := uuid.NewString()[:8]
	nss = make([]string, count(first))
	for i := range nss {
		nss[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return db, testdb.Raw(t, testdb.OpenDSN(t, dsn)), first, nss
}

// TestGroupWritesCandidateRowsInSteps: a Group of more namespaces than a
// round may write candidate rows for (dialect.FirstJoins) writes them over
// its first rounds, the first namespaces in order first (the ones a
// balanced round samples), and neither reads nor takes a seat before its
// row is written; it takes no seat at all while rows wait for a later
// round (the first round's report waits a while, so that attempts queued
// by it would have run); then it takes the seats of the later ones too.
func TestGroupWritesCandidateRowsInSteps(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := electorCtx(t)
			db, raw, first, nss := joinsFixture(t, ctx, tg, func(first int) int { return first + 300 })
			n := len(nss)
			// Joined out of order: the Group sorts them itself.
			shuffled := slices.Clone(nss)
			slices.Reverse(shuffled)
			g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: shuffled, Interval: 200 * time.Millisecond}, WithLogger(silent))
			if err != nil {
				t.Fatal(err)
			}
			q := "SELECT namespace FROM election_candidates WHERE member_id = ? ORDER BY namespace"
			if tg.Name == "postgres" {
				q = "SELECT namespace FROM election_candidates WHERE member_id = $1 ORDER BY namespace"
			}
			type step struct {
				rows    []string
				leading []string
			}
			steps := make(chan step, 1024)
			var reported atomic.Int32
			g.hooks.round = func(rr roundReport) {
				if rr.err != nil {
					return
				}
				var st step
				if reported.Add(1) == 1 {
					time.Sleep(500 * time.Millisecond)
				}
				st.leading = g.Leading()
				rows, err := raw.QueryContext(ctx, q, g.ID())
				if err != nil {
					t.Error(err)
					return
				}
				defer rows.Close()
				for rows.Next() {
					var ns string
					if err := rows.Scan(&ns); err != nil {
						t.Error(err)
						return
					}
					st.rows = append(st.rows, ns)
				}
				select {
				case steps <- st:
				default:
				}
			}
			runUntilCleanup(t, ctx, g)

			deadline := time.After(time.Minute)
			var round1 step
			select {
			case round1 = <-steps:
			case <-deadline:
				t.Fatal("no round succeeded within a minute")
			}
			if !slices.Equal(round1.rows, nss[:first]) {
				t.Fatalf("the first round wrote %d candidate rows (%v ... ), want the first %d namespaces in order",
					len(round1.rows), round1.rows[:min(3, len(round1.rows))], first)
			}
			for st := round1; ; {
				if len(st.rows) < n && len(st.leading) > 0 {
					t.Fatalf("the Group leads %d namespaces with %d of %d candidate rows written", len(st.leading), len(st.rows), n)
				}
				for _, ns := range st.leading {
					if _, written := slices.BinarySearch(st.rows, ns); !written {
						t.Fatalf("the Group leads %s before its candidate row is written", ns)
					}
				}
				later := slices.ContainsFunc(st.leading, func(ns string) bool { return ns >= nss[first] })
				if len(st.rows) == n && later {
					break
				}
				select {
				case st = <-steps:
				case <-deadline:
					t.Fatalf("after a minute the Group has %d of %d candidate rows and leads %d namespaces, none past the first %d",
						len(st.rows), n, len(st.leading), first)
				}
			}
		})
	}
}

// TestGroupWritesCandidateRowsAfterSlowRounds: a round that renews no
// lease and is slow (not heavy) with writing candidate rows does not halve
// the rows the next may write, which doubles as after a quick round: a
// Group of three times the first round's rows has them all after two
// rounds, each slow, while its seats wait (at a cold start of 10,000 x 16
// the rows took three such rounds each).
func TestGroupWritesCandidateRowsAfterSlowRounds(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := electorCtx(t)
			db, raw, first, nss := joinsFixture(t, ctx, tg, func(first int) int { return 3 * first })
			n := len(nss)
			g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss, Interval: 200 * time.Millisecond},
				WithExpire(2*time.Second), WithLogger(silent))
			if err != nil {
				t.Fatal(err)
			}
			slow := g.t.slowRound() + (g.t.heavyRound()-g.t.slowRound())/2
			var calls atomic.Int32
			g.hooks.call = func(ctx context.Context) error {
				if calls.Add(1) <= 2 {
					time.Sleep(slow) // the first two rounds: slow, not heavy
				}
				return nil
			}
			q := "SELECT COUNT(*) FROM election_candidates WHERE member_id = ?"
			if tg.Name == "postgres" {
				q = "SELECT COUNT(*) FROM election_candidates WHERE member_id = $1"
			}
			written := make(chan int, 16)
			var rounds atomic.Int32
			g.hooks.round = func(rr roundReport) {
				if rr.err != nil || rounds.Add(1) > 2 {
					return
				}
				var k int
				if err := raw.QueryRowContext(ctx, q, g.ID()).Scan(&k); err != nil {
					t.Error(err)
				}
				written <- k
			}
			runUntilCleanup(t, ctx, g)
			for i, want := range []int{first, n} {
				select {
				case got := <-written:
					if got != want {
						t.Fatalf("after slow round %d the Group has %d of %d candidate rows, want %d", i+1, got, n, want)
					}
				case <-time.After(time.Minute):
					t.Fatalf("round %d did not succeed within a minute", i+1)
				}
			}
		})
	}
}

// TestGroupWritesCandidateRowsAgainAfterLapse: on PostgreSQL a Group whose
// member row lapsed for longer than a window, and whose candidate rows a
// prune deleted meanwhile (a process paused that long), writes them again:
// it is a candidate again wherever it joined.
func TestGroupWritesCandidateRowsAgainAfterLapse(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	const n = 8
	db := testdb.OpenDSN(t, tg.DSN)
	ctx := electorCtx(t)
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	raw := testdb.Raw(t, testdb.OpenDSN(t, tg.DSN))
	prefix := uuid.NewString()[:8]
	nss := make([]string, n)
	for i := range nss {
		nss[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	// Another candidate leads every namespace, so the Group follows.
	other := uuid.New()
	for i, ns := range nss {
		if _, err := raw.ExecContext(ctx, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
			"VALUES ($1, $2, $3, clock_timestamp() + interval '1 hour', now(), now())", ns, other, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss, Interval: 100 * time.Millisecond}, WithLogger(silent))
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var k int
		if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_candidates WHERE member_id = $1", g.ID()).Scan(&k); err != nil {
			t.Error(err)
		}
		return k
	}
	var rounds, pruned atomic.Int64
	g.hooks.round = func(rr roundReport) {
		if rr.err != nil || rounds.Add(1) != 3 {
			return
		}
		if k := count(); k != n {
			t.Errorf("%d candidate rows after three rounds, want %d", k, n)
		}
		// What a prune leaves of a member lapsed for longer than a window.
		if _, err := raw.ExecContext(ctx, "UPDATE election_members SET expires_at = clock_timestamp() - interval '1 hour' WHERE member_id = $1", g.ID()); err != nil {
			t.Error(err)
		}
		if _, err := raw.ExecContext(ctx, "DELETE FROM election_candidates WHERE member_id = $1", g.ID()); err != nil {
			t.Error(err)
		}
		pruned.Store(1)
	}
	runUntilCleanup(t, ctx, g)
	for deadline := time.Now().Add(30 * time.Second); pruned.Load() == 0 || count() != n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d candidate rows 30 s after the member row lapsed and its rows were pruned (%d rounds)", count(), n, rounds.Load())
		}
	}
}

// TestSomeOf: a round reads at most n of the free seats, each a distinct
// one of them, all of them when there are no more than n, and over a few
// rounds every one.
func TestSomeOf(t *testing.T) {
	nss := make([]string, 50)
	for i := range nss {
		nss[i] = fmt.Sprintf("ns-%02d", i)
	}
	if got := someOf(slices.Clone(nss), 50); !slices.Equal(got, nss) {
		t.Fatalf("someOf of 50 seats with a budget of 50 = %v, want them all", got)
	}
	read := map[string]bool{}
	for range 100 {
		got := someOf(slices.Clone(nss), 10)
		if len(got) != 10 {
			t.Fatalf("someOf(50 seats, 10) returned %d", len(got))
		}
		once := map[string]bool{}
		for _, ns := range got {
			if once[ns] || !slices.Contains(nss, ns) {
				t.Fatalf("someOf returned %q twice or not one of the seats: %v", ns, got)
			}
			once[ns], read[ns] = true, true
		}
	}
	if len(read) != len(nss) {
		t.Errorf("100 rounds of 10 read %d of the 50 seats, want all", len(read))
	}
}
