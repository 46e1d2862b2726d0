package election

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/pace"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// TestGroupReadsFollowItsRoom: the free seats a balanced Group's round
// reads by key, and the most seats each reading of its range returns,
// follow what it may take: below its share, twice the room the share
// leaves but never fewer than a first round's candidate rows until it has
// led its share once, and never fewer than atShareReads after; at its
// share, atShareReads, with the range at a first round's rows. Without
// Balance, and with no bound on the seats kept, the reads take the whole
// budget. What a seat cost the last rounds bounds both (affordLocked). In
// an overload (the seats kept bounded, the attempts shed) a round reads
// none.
func TestGroupReadsFollowItsRoom(t *testing.T) {
	ctx := electorCtx(t)
	db := migratedSQLite(t, ctx, "reads")
	newGroup := func(balance bool) *Group {
		g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: []string{"reads"}, Balance: balance}, WithLogger(silent))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := newGroup(true)
	first := dialect.FirstJoins(g.base.d)
	g.box.lock()
	defer g.box.unlock()
	g.warm = g.clk.Now().Add(-time.Second) // past the warm-up: the share counts whole
	for _, c := range []struct {
		share, leading, budget, reads, rng int
		filled                             bool
	}{
		{share: 10000, leading: 0, budget: pace.Max, reads: 20000, rng: 20000},
		{share: 2500, leading: 1000, budget: pace.Max, reads: 3000, rng: 3000},
		{share: 2500, leading: 2400, budget: pace.Max, reads: first, rng: first},
		{share: 2500, leading: 2400, budget: 100, reads: 100, rng: first},
		{share: 2500, leading: 2500, budget: pace.Max, reads: atShareReads, rng: first},
		{share: 2500, leading: 2501, budget: pace.Max, reads: atShareReads, rng: first},
		{share: 2667, leading: 2500, budget: pace.Max, reads: 334, rng: first, filled: true},
		{share: 2667, leading: 2660, budget: pace.Max, reads: atShareReads, rng: first, filled: true},
		{share: 2667, leading: 1000, budget: pace.Max, reads: 3334, rng: 3334, filled: true},
	} {
		g.share, g.box.leading, g.filled = c.share, c.leading, c.filled
		if got := g.readsLocked(c.budget); got != c.reads {
			t.Errorf("share %d, leading %d, budget %d, filled %v: %d seats read by key, want %d", c.share, c.leading, c.budget, c.filled, got, c.reads)
		}
		if got := g.rangeLocked(); got != c.rng {
			t.Errorf("share %d, leading %d: a range of %d, want %d", c.share, c.leading, got, c.rng)
		}
	}
	g.share, g.box.leading, g.filled = 0, 0, false

	// What a seat cost the last rounds bounds the reads and the range:
	// rounds of half heavyRound return 3,000 seats at this cost (100 µs at
	// TTL 2 s), of which the Group renews its own.
	cost := g.t.heavyRound() / 6000
	for i := range 3 {
		g.noteCostLocked(time.Duration(costRows-1)*time.Second, costRows-1) // too few seats to count
		n := 4000 + i*1000
		g.noteCostLocked(time.Duration(n)*cost, n)
	}
	if g.seatCost != cost {
		t.Fatalf("seat cost %v after rounds of %v a seat, want %v", g.seatCost, cost, cost)
	}
	for _, c := range []struct {
		share, leading, reads, rng int
	}{
		{share: 10000, leading: 0, reads: 3000, rng: 3000},
		{share: 2500, leading: 2400, reads: 600, rng: 600},
		{share: 2667, leading: 2990, reads: atShareReads, rng: atShareReads},
	} {
		g.share, g.box.leading = c.share, c.leading
		if got := g.readsLocked(pace.Max); got != c.reads {
			t.Errorf("at %v a seat, share %d, leading %d: %d seats read by key, want %d", cost, c.share, c.leading, got, c.reads)
		}
		if got := g.rangeLocked(); got != c.rng {
			t.Errorf("at %v a seat, share %d, leading %d: a range of %d, want %d", cost, c.share, c.leading, got, c.rng)
		}
	}
	g.noteCostLocked(4000*5*cost, 4000) // (3 x 1 + 5) / 4
	if g.seatCost != 2*cost {
		t.Errorf("seat cost %v after a round of %v a seat, want %v", g.seatCost, 5*cost, 2*cost)
	}
	g.share, g.box.leading, g.seatCost = 0, 0, 0

	u := newGroup(false)
	u.box.lock()
	defer u.box.unlock()
	if got := u.readsLocked(5000); got != 5000 {
		t.Errorf("without Balance: %d seats read of a budget of 5000, want all", got)
	}
	u.pace.Round(true) // a slow round sheds the attempts
	u.pace.Heavy(100, time.Second, 250*time.Millisecond)
	if !u.pace.Overloaded() {
		t.Fatal("a bound on the seats kept, with the attempts shed, is an overload")
	}
	if got := u.readsLocked(5000); got != 0 {
		t.Errorf("in an overload: %d seats read, want none", got)
	}
}

// TestGroupFilledOnceAtItsShare: a balanced Group counts as having led
// its share (the floor of its reads drops to atShareReads) once a round
// finds it leading that many seats, and not before.
func TestGroupFilledOnceAtItsShare(t *testing.T) {
	ctx := electorCtx(t)
	db := migratedSQLite(t, ctx, "filled")
	nss := []string{testdb.Namespace(t), testdb.Namespace(t), testdb.Namespace(t)}
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss, Balance: true, Interval: 100 * time.Millisecond},
		WithExpire(time.Second), WithLogger(silent))
	if err != nil {
		t.Fatal(err)
	}
	var early atomic.Bool
	was := false // only the round loop runs the hook
	g.hooks.round = func(rr roundReport) {
		g.box.lock()
		defer g.box.unlock()
		if !was && g.filled && g.box.leading < g.share {
			early.Store(true) // the round that set it found fewer seats led
		}
		was = g.filled
	}
	runUntilCleanup(t, ctx, g)
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.box.lock()
		filled, leading, share := g.filled, g.box.leading, g.share
		g.box.unlock()
		if filled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the Group leads %d seats of a share of %d and has not counted as filled", leading, share)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if early.Load() {
		t.Error("the Group counted as filled while leading fewer seats than its share")
	}
}

// TestGroupCarryCountsTheSeatsRead: after two heavy rounds in a row the
// bound on the seats kept is what a round of a quarter of the trust window
// would return at the last round's time per seat, the seats it read
// counted beside those it renewed: a round slow with reading does not cut
// the seats led below what its renewals need. A single heavy round, or a
// quick one, sets no bound.
func TestGroupCarryCountsTheSeatsRead(t *testing.T) {
	ctx := electorCtx(t)
	db := migratedSQLite(t, ctx, "carry")
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: []string{"carry"}}, WithLogger(silent))
	if err != nil {
		t.Fatal(err)
	}
	g.box.lock()
	defer g.box.unlock()
	target := g.t.trust() / 4
	took := g.t.heavyRound() + g.t.heavyRound()/50 // just past the line
	g.heavy = 1
	g.carryLocked(took, 2500, 5000)
	if c := g.pace.Carry(); c != 0 {
		t.Fatalf("one heavy round set a bound of %d seats, want none", c)
	}
	g.heavy = 2
	g.box.leading = 2500
	g.carryLocked(took, 2500, 5000)
	want := int(int64(5000) * int64(target) / int64(took))
	if c := g.pace.Carry(); c != want || c < 2500 {
		t.Errorf("renewing 2,500 seats and reading 2,500 in %v: a bound of %d seats, want %d (above the 2,500 led)", took, c, want)
	}
	g.carryLocked(took, 2500, 2500) // renewals alone: the bound falls below them
	want = int(int64(2500) * int64(target) / int64(took))
	if c := g.pace.Carry(); c != want {
		t.Errorf("renewing 2,500 seats in %v: a bound of %d seats, want %d", took, c, want)
	}
	g.box.leading = 0
}

// migratedSQLite returns a database of its own for t, a file named name
// on SQLite, migrated: for tests that drive a Group by hand.
func migratedSQLite(t *testing.T, ctx context.Context, name string) *gorm.DB {
	t.Helper()
	db := testdb.OpenDSN(t, "sqlite:"+filepath.Join(t.TempDir(), name+".db"))
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}
