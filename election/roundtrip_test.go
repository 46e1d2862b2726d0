package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// openCounted opens target's database through session.OpenWrapped with a
// round-trip counter, migrates it, and limits the pool to one connection so
// calls run one after another on the same connection. SQLite gets a new
// file.
func openCounted(tb testing.TB, tg testdb.Target) (*gorm.DB, *rtcount.Counter) {
	tb.Helper()
	db, c, _ := openCountedDSN(tb, tg)
	return db, c
}

// budget is the most round trips (calls of the driver, on SQLite) of one
// call of the protocol: on PostgreSQL and MariaDB, which run it as one
// statement; on SQLite, which runs its writes in one call; and on MySQL
// and TiDB, which keep their transactions (see docs/performance.md).
type budget struct{ postgres, mariadb, sqlite, mysql int64 }

// fastPath reports whether db's dialect runs Elect and the vacating calls
// in one round trip (dialect.Acquirer): everywhere but MySQL and TiDB.
func fastPath(tb testing.TB, db *gorm.DB) bool {
	tb.Helper()
	d, err := dialect.For(db)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if d, err = dialect.Detect(ctx, db, d); err != nil {
		tb.Fatalf("detecting the dialect: %v", err)
	}
	return dialect.AcquirerOf(d) != nil && dialect.VacaterOf(d, false) != nil
}

func (b budget) of(tb testing.TB, tg testdb.Target, db *gorm.DB) int64 {
	switch {
	case tg.Name == "postgres":
		return b.postgres
	case tg.Name == "sqlite":
		return b.sqlite
	case fastPath(tb, db):
		return b.mariadb
	}
	return b.mysql
}

var (
	// acquireRoundTrips: Elect taking a free seat (a new namespace, a
	// vacant seat, a lapsed lease) whether or not the Election has read
	// the seat before; and a candidate's Elect while another holds a live
	// lease (no lock, its own row refreshed). PostgreSQL and MariaDB: one
	// statement. SQLite: the unlocked read, then the writes from BEGIN
	// IMMEDIATE to COMMIT in one call (or the follower's refresh). MySQL
	// and TiDB: the unlocked read, begin, the locking read, the
	// candidate's row, the seat, the history (and a lapsed term's end),
	// commit.
	acquireRoundTrips = budget{postgres: 1, mariadb: 1, sqlite: 2, mysql: 7}
	// followerRoundTrips: Elect while another candidate's lease is live.
	followerRoundTrips = budget{postgres: 1, mariadb: 1, sqlite: 2, mysql: 2}
	// renewRoundTrips is exact: the leader's renewal through the Election
	// that granted its lease is one guarded statement that also refreshes
	// its candidate row (SQLite: two statements, each its own commit). It
	// writes nothing to the history.
	renewRoundTrips = budget{postgres: 1, mariadb: 1, sqlite: 1 + 1, mysql: 1}
	// vacateRoundTrips: a leader's Resign or UnregisterCandidate, the
	// wake-up of other processes' candidates done after it (the MySQL
	// family's KILL QUERY from other connections, SQLite's line in a
	// file). PostgreSQL (its NOTIFY in the statement), MariaDB and
	// SQLite: one call. MySQL and TiDB: begin, the seat, the candidate's
	// row, the term's end, the listeners' lookup, commit.
	vacateRoundTrips = budget{postgres: 1, mariadb: 1, sqlite: 1, mysql: 6}
)

// counted runs call and returns the round trips it made on c.
func counted(t *testing.T, c *rtcount.Counter, call func()) rtcount.Counts {
	t.Helper()
	before := c.Snapshot()
	call()
	return c.Snapshot().Sub(before)
}

// roundTrips checks counts of calls against their budgets. In the pool's
// first pass over the calls (warm), which may prepare statements (SQLite)
// and opens the connection, it only logs them; afterwards it fails the
// test when a call is over its budget or prepares a statement.
type roundTrips struct {
	t    *testing.T
	warm bool
}

func (r roundTrips) within(what string, n rtcount.Counts, most int64) {
	r.t.Helper()
	if r.warm {
		r.t.Logf("%s, on the pool's first pass: %d round trips (%v)", what, n.Total(), n)
		return
	}
	if n.Total() > most {
		r.t.Errorf("%s made %d round trips (%v), want at most %d", what, n.Total(), n, most)
	}
	if n[rtcount.Prepare] > 0 {
		r.t.Errorf("%s prepared %d statements (%v) on a pool that had run them", what, n[rtcount.Prepare], n)
	}
	r.t.Logf("%s: %d round trips (%v)", what, n.Total(), n)
}

// yesNo names the variants of a call in messages.
func yesNo(b bool) string { return map[bool]string{false: "no", true: "yes"}[b] }

// TestRoundTripElect pins the round trips of Elect and of the vacating
// calls on every database, so that an extra statement on these paths fails
// here rather than only showing in a benchmark: a free seat taken (a new
// namespace, a vacant seat, a lapsed lease) by a new Election, as an
// Elector's first round is, and by one that read the seat before; a
// follower; the leader's renewal; Resign and UnregisterCandidate. The
// calls run twice on one pool: the first pass (the pool's first use of
// each statement, which may prepare it) is only logged, and the second
// must keep the budgets without preparing anything.
func TestRoundTripElect(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db, c := openCounted(t, tg)
			acquire, follower := acquireRoundTrips.of(t, tg, db), followerRoundTrips.of(t, tg, db)
			renew, vacate := renewRoundTrips.of(t, tg, db), vacateRoundTrips.of(t, tg, db)
			for pass, warm := range []bool{true, false} {
				ns := testdb.Namespace(t) + "." + []string{"warm", "counted"}[pass]
				r := roundTrips{t: t, warm: warm}

				// A new namespace, by a new Election (an Elector's first
				// round) and by one that read the seat first.
				for _, read := range []bool{false, true} {
					e := mustElection(t, db, ns+".new."+yesNo(read))
					if read {
						if l, err := e.Leader(ctx); err != nil || !l.Vacant() {
							t.Fatalf("Leader of a new namespace: %+v, %v", l, err)
						}
					}
					id := uuid.New()
					var l election.Lease
					n := counted(t, c, func() { l = mustElect(t, e, id) })
					if !l.HeldBy(id) || l.Term != 1 {
						t.Fatalf("first Elect gave %+v, want %s in term 1", l, id)
					}
					r.within("a new namespace's first acquisition (seat read first: "+yesNo(read)+")", n, acquire)
				}

				// The leader's renewal, exactly; a follower's Elect.
				e := mustElection(t, db, ns+".renew")
				leader := uuid.New()
				granted := mustElect(t, e, leader)
				mustElect(t, e, leader) // a leader prunes on a renewal, at most every five expiry windows
				for i := 0; i < 3; i++ {
					var l election.Lease
					n := counted(t, c, func() { l = mustElect(t, e, leader) })
					if !l.HeldBy(leader) || l.Term != granted.Term || l.ExpiresAt.Before(granted.ExpiresAt) {
						// Not Before rather than After: SQLite's clock ticks in
						// milliseconds.
						t.Fatalf("renewal gave %+v after %+v, want the same term, expiring no earlier", l, granted)
					}
					if !warm && n.Total() != renew {
						t.Errorf("renewal made %d round trips (%v), want %d", n.Total(), n, renew)
					}
				}
				for _, fresh := range []bool{true, false} {
					f := e
					if fresh {
						f = mustElection(t, db, ns+".renew")
					}
					var l election.Lease
					n := counted(t, c, func() { l = mustElect(t, f, uuid.New()) })
					if !l.HeldBy(leader) {
						t.Fatalf("follower's Elect gave %+v, want %s leading", l, leader)
					}
					r.within("a follower's Elect (new Election: "+yesNo(fresh)+")", n, follower)
				}

				// Resign: the seat vacant, taken by a new Election and by one
				// that read it vacant; UnregisterCandidate of the leader.
				for _, read := range []bool{false, true} {
					n := counted(t, c, func() {
						if err := e.Resign(ctx, leader); err != nil {
							t.Fatalf("Resign: %v", err)
						}
					})
					r.within("the leader's Resign", n, vacate)
					next := mustElection(t, db, ns+".renew")
					if read {
						if l, err := next.Leader(ctx); err != nil || !l.Vacant() {
							t.Fatalf("Leader after Resign: %+v, %v", l, err)
						}
					}
					leader = uuid.New()
					var l election.Lease
					n = counted(t, c, func() { l = mustElect(t, next, leader) })
					if !l.HeldBy(leader) {
						t.Fatalf("Elect after Resign gave %+v, want %s leading", l, leader)
					}
					r.within("taking a vacant seat (seat read first: "+yesNo(read)+")", n, acquire)
					e = next
				}
				n := counted(t, c, func() {
					if err := e.UnregisterCandidate(ctx, leader); err != nil {
						t.Fatalf("UnregisterCandidate: %v", err)
					}
				})
				r.within("the leader's UnregisterCandidate", n, vacate)
				if l, err := e.Leader(ctx); err != nil || !l.Vacant() {
					t.Fatalf("Leader after UnregisterCandidate: %+v, %v", l, err)
				}

				// A lapsed lease taken over, by a new Election and by one
				// that last saw it live; the old term ends in the history.
				for _, read := range []bool{false, true} {
					short := mustElection(t, db, ns+".lapse."+yesNo(read), election.WithExpire(shortExpire))
					old := mustElect(t, short, uuid.New())
					taker := short
					if !read {
						taker = mustElection(t, db, short.Namespace(), election.WithExpire(shortExpire))
					}
					waitSeatVacant(t, ctx, mustElection(t, db, short.Namespace()))
					id := uuid.New()
					var l election.Lease
					n := counted(t, c, func() { l = mustElect(t, taker, id) })
					if !l.HeldBy(id) || l.Term != old.Term+1 {
						t.Fatalf("takeover gave %+v after %+v, want %s in the next term", l, old, id)
					}
					r.within("a takeover after expiry (seat last seen live: "+yesNo(read)+")", n, acquire)
					h, err := short.History(ctx, 2)
					if err != nil || len(h) != 2 || h[1].EndReason != election.EndExpired || !h[1].EndedAt.Equal(old.ExpiresAt) {
						t.Fatalf("history after the takeover: %+v, %v; want the lapsed term ended as expired at %v", h, err, old.ExpiresAt)
					}
				}
			}
		})
	}
}

// TestRoundTripElectorFirstRound: an Elector's first round on a free seat,
// from Run to leading, on a pool of one connection (which does not
// listen for handoffs), is one Elect.
func TestRoundTripElectorFirstRound(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db, c := openCounted(t, tg)
			most := acquireRoundTrips.of(t, tg, db)
			mustElect(t, mustElection(t, db, testdb.Namespace(t)+".warm"), uuid.New()) // the pool's first use
			e := mustElection(t, db, testdb.Namespace(t))
			leading := make(chan rtcount.Counts, 1)
			el, err := e.NewElector(uuid.New(), election.ElectorConfig{
				OnStartedLeading: func(context.Context, election.Lease) { leading <- c.Snapshot() },
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			done := make(chan error, 1)
			before := c.Snapshot()
			go func() { done <- el.Run(ctx) }()
			var n rtcount.Counts
			select {
			case snap := <-leading:
				n = snap.Sub(before)
			case err := <-done:
				t.Fatalf("Run returned before leading: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("not leading after 30s on a free seat")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			roundTrips{t: t}.within("an Elector's first round", n, most)
		})
	}
}
