package election_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// roundProbe sends the round-trip count each time a Group's round begins,
// known by its first statement (the member row's refresh; on PostgreSQL
// the round's one statement). The prunes, which run between rounds every
// five expiry windows, are counted apart.
type roundProbe struct {
	c      *rtcount.Counter
	pruned atomic.Int64
	snaps  chan roundSnap
}

type roundSnap struct {
	counts rtcount.Counts
	pruned int64
}

// since returns the round trips from s to later, prunes left out.
func (later roundSnap) since(s roundSnap) int64 {
	return later.counts.Sub(s.counts).Total() - (later.pruned - s.pruned)
}

func newRoundProbe() *roundProbe {
	p := &roundProbe{c: &rtcount.Counter{}, snaps: make(chan roundSnap, 100)}
	p.c.Observe = func(_ rtcount.Kind, q string) {
		switch {
		case isPrune(q):
			p.pruned.Add(1)
		case strings.HasPrefix(q, "INSERT INTO election_members"), strings.HasPrefix(q, "/* sqlelect round: "),
			strings.Contains(q, "STRAIGHT_JOIN election_members"):
			// This statement counted: between two snapshots, one round.
			// (MySQL's round renews its leases and refreshes the member
			// row in one UPDATE when it holds any.)
			select {
			case p.snaps <- roundSnap{counts: p.c.Snapshot(), pruned: p.pruned.Load()}:
			default:
			}
		}
	}
	return p
}

// openCountedDSN is openCounted that also returns the DSN reaching the
// same database, for a second pool.
func openCountedDSN(tb testing.TB, tg testdb.Target) (*gorm.DB, *rtcount.Counter, string) {
	tb.Helper()
	c := &rtcount.Counter{}
	db, dsn := openCountedWith(tb, tg, c)
	return db, c, dsn
}

// openCountedWith is openCountedDSN with a counter of the caller's (whose
// Observe is set).
func openCountedWith(tb testing.TB, tg testdb.Target, c *rtcount.Counter) (*gorm.DB, string) {
	tb.Helper()
	dsn := tg.DSN
	if tg.Name == "sqlite" {
		dsn = tg.SQLiteDSN(filepath.Join(tb.TempDir(), "grouprt.db"))
	}
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
	return db, dsn
}

// tally counts, on a pool openTallied opened, the transactions begun and
// the statements sent that begin with each of its prefixes, while on (off
// at first: the migrations are not counted).
type tally struct {
	on       atomic.Bool
	begins   atomic.Int64
	prefixes []string
	sent     []atomic.Int64 // by prefix
}

// openTallied is openCountedWith counted by a tally of prefixes.
func openTallied(tb testing.TB, tg testdb.Target, prefixes ...string) (*gorm.DB, *tally) {
	tl := &tally{prefixes: prefixes, sent: make([]atomic.Int64, len(prefixes))}
	db, _ := openCountedWith(tb, tg, &rtcount.Counter{Observe: func(k rtcount.Kind, q string) {
		switch {
		case !tl.on.Load():
		case k == rtcount.Begin:
			tl.begins.Add(1)
		default:
			for i, p := range tl.prefixes {
				if strings.HasPrefix(q, p) {
					tl.sent[i].Add(1)
					return
				}
			}
		}
	}})
	return db, tl
}

// detected is db's dialect, with what the server runs detected (MariaDB's
// compound statements, TiDB, Galera).
func detected(t *testing.T, db *gorm.DB) dialect.Dialect {
	t.Helper()
	d, err := dialect.For(db)
	must(t, "dialect", err)
	d, err = dialect.Detect(testCtx(t), db, d)
	must(t, "detecting the server", err)
	return d
}

// roundTripsOn is the most round trips a Group's round may make on tg:
// one where the round is one statement (PostgreSQL, MariaDB), several
// elsewhere.
func roundTripsOn(t *testing.T, tg testdb.Target, several int64) int64 {
	t.Helper()
	if dialect.OneStatementRound(detected(t, testdb.Open(t, tg))) {
		return 1
	}
	return several
}

// isPrune reports whether query is one of the statements a leader prunes
// with, every five expiry windows, after a round and never in it.
func isPrune(query string) bool {
	for _, p := range []string{
		"SELECT c.namespace, c.candidate_id FROM election_candidates c",
		"DELETE FROM election_candidates WHERE namespace = ",
		"WITH b AS MATERIALIZED (SELECT",             // BatchPrune on PostgreSQL
		"DELETE FROM election_candidates WHERE MAX(", // and on SQLite
		"SELECT member_id FROM election_members WHERE expires_at <",
		"DELETE FROM election_members WHERE member_id = ? AND expires_at <",
		"DELETE FROM election_members WHERE member_id = $1 AND expires_at <",
		"DELETE FROM election_history WHERE",
	} {
		if strings.HasPrefix(query, p) {
			return true
		}
	}
	return false
}

// groupRoundTrips runs a Group on a counted pool of one connection in n
// namespaces and returns the most round trips one of five rounds made,
// counted between the first statements of two rounds. With
// follow, another Group, on a pool of its own, leads every namespace
// first, and the counted one follows; otherwise the counted one leads
// them all before the count begins.
func groupRoundTrips(t *testing.T, tg testdb.Target, n int, cfg election.GroupConfig, follow bool) int64 {
	t.Helper()
	probe := newRoundProbe()
	db, dsn := openCountedWith(t, tg, probe.c)
	nss := groupNamespaces(t, n)
	ready := func(g *election.Group) bool { return len(g.Leading()) == n }
	if follow {
		leader := runGroup(t, testdb.OpenDSN(t, dsn), uuid.New(), election.GroupConfig{Namespaces: nss, Interval: cfg.Interval})
		waitUntil(t, 30*time.Second, "the leader leads every namespace", func() bool { return len(leader.g.Leading()) == n })
		ready = func(g *election.Group) bool { return len(g.Leading()) == 0 && len(leader.g.Leading()) == n }
		defer func() { must(t, "the leader's Run", leader.stop()) }()
	}
	cfg.Namespaces = nss
	// A leader renews every third of its expiry window: 1.5 s here.
	g, err := election.NewGroup(testCtx(t), db, uuid.New(), cfg, election.WithLogger(quiet), election.WithExpire(1500*time.Millisecond))
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
	next := func() roundSnap {
		select {
		case s := <-probe.snaps:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("no round")
			return roundSnap{}
		}
	}
	next() // the round in flight when the Group was ready may be its first, which joins its namespaces
	prev := next()
	var most int64
	for range 5 {
		s := next()
		most = max(most, s.since(prev))
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
// PostgreSQL and MariaDB (the round is one statement), two elsewhere (the
// reading of every seat and the heartbeat of every row; nothing to renew).
func TestGroupFollowerRoundTrips(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			want := roundTripsOn(t, tg, 2)
			perRound := map[int]int64{}
			for _, n := range []int{4, 64} {
				// Rounds of a quarter of the interval shed the attempts
				// (a slow database): 200 ms leaves TiDB's rounds quick.
				most := groupRoundTrips(t, tg, n, election.GroupConfig{Interval: 200 * time.Millisecond}, true)
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
// live candidates included: one on PostgreSQL and MariaDB, three
// elsewhere (renewal, reading with the count, heartbeat).
func TestGroupBalanceRoundTrips(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			want := roundTripsOn(t, tg, 3)
			perRound := map[int]int64{}
			for _, n := range []int{4, 64} {
				// Rounds of a quarter of the interval shed the attempts
				// (a slow database): 200 ms leaves TiDB's rounds quick.
				most := groupRoundTrips(t, tg, n, election.GroupConfig{Interval: 200 * time.Millisecond, Balance: true}, false)
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

// TestGroupAttemptsBeginNoTransaction: a Group takes free seats without
// a transaction of its own: on PostgreSQL and MariaDB in batch takes, and
// on SQLite with Elect's fast path (two calls) without the refresh of the
// candidate row. Its attempts used to run Elect's transaction on MariaDB
// and SQLite, about seven statements a seat.
func TestGroupAttemptsBeginNoTransaction(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db, tl := openTallied(t, tg)
			if d := detected(t, db); dialect.AcquirerOf(d) == nil && !dialect.TakesSeatsAtOnce(d) {
				t.Skipf("%s has no one-round-trip Elect (MySQL, TiDB, a SQLite driver without several statements a call)", d.Name())
			}
			tl.on.Store(true)
			nss := groupNamespaces(t, 8)
			g := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 200 * time.Millisecond})
			defer func() { must(t, "Run", g.stop()) }()
			waitUntil(t, 30*time.Second, "the Group leads every namespace", func() bool { return len(g.g.Leading()) == len(nss) })
			if b := tl.begins.Load(); b != 0 {
				t.Errorf("%d transactions began on the way to leading %d free seats, want 0", b, len(nss))
			}
		})
	}
}
