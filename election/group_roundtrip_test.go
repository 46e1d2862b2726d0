package election_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// roundProbe sends the round-trip count each time the Group reports a
// round's outcome in one namespace: once per round.
type roundProbe struct {
	election.NopObserver
	ns      string
	outcome election.Outcome
	c       *rtcount.Counter
	snaps   chan rtcount.Counts
}

func (o *roundProbe) Attempt(a election.Attempt) {
	if a.Namespace == o.ns && a.Outcome == o.outcome {
		select {
		case o.snaps <- o.c.Snapshot():
		default:
		}
	}
}

// openCountedDSN is openCounted that also returns the DSN reaching the
// same database, for a second pool.
func openCountedDSN(tb testing.TB, tg testdb.Target) (*gorm.DB, *rtcount.Counter, string) {
	tb.Helper()
	dsn := tg.DSN
	if tg.Name == "sqlite" {
		dsn = tg.SQLiteDSN(filepath.Join(tb.TempDir(), "grouprt.db"))
	}
	c := &rtcount.Counter{}
	db, err := session.OpenWrapped(dsn, c.Wrap)
	if err != nil {
		tb.Fatalf("opening %s: %v", tg.Name, err)
	}
	tb.Cleanup(func() { testdb.Close(db) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, db); err != nil {
		tb.Fatalf("migrate.Up on %s: %v", tg.Name, err)
	}
	testdb.Raw(tb, db).SetMaxOpenConns(1)
	return db, c, dsn
}

// groupRoundTrips runs a Group on a counted pool of one connection in n
// namespaces and returns the most round trips one of five rounds made,
// counted between two reports of outcome in its first namespace. With
// follow, another Group, on a pool of its own, leads every namespace
// first, and the counted one follows; otherwise the counted one leads
// them all before the count begins.
func groupRoundTrips(t *testing.T, tg testdb.Target, n int, cfg election.GroupConfig, outcome election.Outcome, follow bool) int64 {
	t.Helper()
	db, c, dsn := openCountedDSN(t, tg)
	nss := groupNamespaces(t, n)
	ready := func(g *election.Group) bool { return len(g.Leading()) == n }
	if follow {
		leader := runGroup(t, testdb.OpenDSN(t, dsn), uuid.New(), election.GroupConfig{Namespaces: nss, Interval: cfg.Interval})
		waitUntil(t, 30*time.Second, "the leader leads every namespace", func() bool { return len(leader.g.Leading()) == n })
		ready = func(g *election.Group) bool { return len(g.Leading()) == 0 && len(leader.g.Leading()) == n }
		defer func() { must(t, "the leader's Run", leader.stop()) }()
	}
	probe := &roundProbe{ns: nss[0], outcome: outcome, c: c, snaps: make(chan rtcount.Counts, 100)}
	cfg.Namespaces = nss
	g, err := election.NewGroup(testCtx(t), db, uuid.New(), cfg, election.WithLogger(quiet), election.WithObserver(probe))
	must(t, "NewGroup", err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		must(t, "Run", <-done)
	}()
	waitUntil(t, 30*time.Second, "the Group is where its rounds are counted", func() bool { return ready(g) })
	for len(probe.snaps) > 0 {
		<-probe.snaps
	}
	next := func() rtcount.Counts {
		select {
		case s := <-probe.snaps:
			return s
		case <-time.After(30 * time.Second):
			t.Fatalf("no round reported %s", outcome)
			return rtcount.Counts{}
		}
	}
	prev := next()
	var most int64
	for range 5 {
		s := next()
		most = max(most, s.Sub(prev).Total())
		prev = s
	}
	if !ready(g) {
		t.Errorf("%d namespaces: the Group changed while counted (leading %d)", n, len(g.Leading()))
	}
	return most
}

// TestGroupFollowerRoundTrips: a Group that follows every one of its
// namespaces (another Group, on another pool, leads them) makes the same
// number of round trips per round with 4 namespaces as with 64: one on
// PostgreSQL (the round is one statement), two elsewhere (the reading of
// every seat and the heartbeat of every row; nothing to renew).
func TestGroupFollowerRoundTrips(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			want := int64(2)
			if tg.Name == "postgres" {
				want = 1
			}
			perRound := map[int]int64{}
			for _, n := range []int{4, 64} {
				most := groupRoundTrips(t, tg, n, election.GroupConfig{Interval: 50 * time.Millisecond}, election.OutcomeFollower, true)
				if most > want {
					t.Errorf("%d namespaces: a follower's round made %d round trips, want at most %d", n, most, want)
				}
				perRound[n] = most
			}
			if perRound[4] != perRound[64] {
				t.Errorf("a follower's round trips per round: %d with 4 namespaces, %d with 64", perRound[4], perRound[64])
			}
			t.Logf("a follower's round trips per round: %v", perRound)
		})
	}
}

// TestGroupBalanceRoundTrips: with Balance, a Group leading every one of
// its namespaces (alone, its share is all of them) makes the same number
// of round trips per round with 4 namespaces as with 64, the count of the
// live candidates included: one on PostgreSQL, three elsewhere (renewal,
// reading with the count, heartbeat).
func TestGroupBalanceRoundTrips(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			want := int64(3)
			if tg.Name == "postgres" {
				want = 1
			}
			perRound := map[int]int64{}
			for _, n := range []int{4, 64} {
				most := groupRoundTrips(t, tg, n, election.GroupConfig{Interval: 50 * time.Millisecond, Balance: true}, election.OutcomeRenewed, false)
				if most > want {
					t.Errorf("%d namespaces: a Balance round made %d round trips, want at most %d", n, most, want)
				}
				perRound[n] = most
			}
			if perRound[4] != perRound[64] {
				t.Errorf("Balance round trips per round: %d with 4 namespaces, %d with 64", perRound[4], perRound[64])
			}
			t.Logf("Balance round trips per round: %v", perRound)
		})
	}
}

// TestGroupAttemptsLeaveCandidateRows: a Group's attempts write only seats
// and history, never its candidate rows, which its rounds keep. So an
// attempt holding a seat's lock never waits for the Group's own round,
// which holds those rows until it commits (and another process's renewal
// of that seat would wait behind both). The Group takes three vacant seats
// (queued attempts) and one at the end of another candidate's lease (the
// edge); none of that runs the one-row upsert Elect uses. (The attempter
// tries one seat at a time, and a round leaves out only the seat being
// tried: the rounds' heartbeats here are of three rows or four, never the
// one-row text.)
func TestGroupAttemptsLeaveCandidateRows(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn := tg.DSN
			if tg.Name == "sqlite" {
				dsn = "sqlite:" + filepath.Join(t.TempDir(), "rows.db")
			}
			var (
				mu      sync.Mutex
				writes  []string // the candidate-row writes sent
				capture = true
			)
			c := &rtcount.Counter{Observe: func(k rtcount.Kind, q string) {
				// Sent, not prepared (SQLite's Elections prepare their
				// statements ahead).
				if k != rtcount.Prepare && strings.Contains(q, "INSERT INTO election_candidates") {
					mu.Lock()
					if capture {
						writes = append(writes, q)
					}
					mu.Unlock()
				}
			}}
			db, err := session.OpenWrapped(dsn, c.Wrap)
			must(t, "opening the counted pool", err)
			t.Cleanup(func() { testdb.Close(db) })
			must(t, "migrate.Up", migrate.Up(testCtx(t), db))

			// The text of Elect's one-row upsert, from an Election's first
			// acquisition on the same pool.
			mustElect(t, mustElection(t, db, testdb.Namespace(t)+".single"), uuid.New())
			mu.Lock()
			single := map[string]bool{}
			for _, q := range writes {
				single[q] = true
			}
			writes = nil
			mu.Unlock()
			if len(single) == 0 {
				t.Fatal("Elect sent no write of a candidate row")
			}
			nss := groupNamespaces(t, 4)
			other := mustElection(t, testdb.OpenDSN(t, dsn), nss[0], election.WithExpire(time.Second))
			mustElect(t, other, uuid.New())
			g := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 200 * time.Millisecond})
			waitUntil(t, 30*time.Second, "the Group leads every namespace", func() bool { return len(g.g.Leading()) == len(nss) })
			mu.Lock()
			capture = false
			sent := writes
			mu.Unlock()
			if len(sent) == 0 {
				t.Fatal("the Group's rounds sent no heartbeat")
			}
			for _, q := range sent {
				if single[q] {
					t.Fatalf("a Group attempt wrote its candidate row with Elect's upsert: %.120s", q)
				}
			}
		})
	}
}
