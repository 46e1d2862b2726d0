package election

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/pace"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// TestGroupReadsFollowItsRoom: the free seats a balanced Group's round
// reads by key, and the most seats each reading of its range returns,
// follow what it may take: below its share, twice the room the share
// leaves but never fewer than a first round's candidate rows; at its
// share, atShareReads, with the range at a first round's rows. Without
// Balance, and with no bound on the seats kept, the reads take the whole
// budget. In an overload (the seats kept bounded, the attempts shed) a
// round reads none.
func TestGroupReadsFollowItsRoom(t *testing.T) {
	db := testdb.OpenDSN(t, "sqlite:"+filepath.Join(t.TempDir(), "reads.db"))
	ctx := electorCtx(t)
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
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
	}{
		{share: 10000, leading: 0, budget: pace.Max, reads: 20000, rng: 20000},
		{share: 2500, leading: 1000, budget: pace.Max, reads: 3000, rng: 3000},
		{share: 2500, leading: 2400, budget: pace.Max, reads: first, rng: first},
		{share: 2500, leading: 2400, budget: 100, reads: 100, rng: first},
		{share: 2500, leading: 2500, budget: pace.Max, reads: atShareReads, rng: first},
		{share: 2500, leading: 2501, budget: pace.Max, reads: atShareReads, rng: first},
	} {
		g.share, g.box.leading = c.share, c.leading
		if got := g.readsLocked(c.budget); got != c.reads {
			t.Errorf("share %d, leading %d, budget %d: %d seats read by key, want %d", c.share, c.leading, c.budget, got, c.reads)
		}
		if got := g.rangeLocked(); got != c.rng {
			t.Errorf("share %d, leading %d: a range of %d, want %d", c.share, c.leading, got, c.rng)
		}
	}
	g.share, g.box.leading = 0, 0

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
