package election

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestGroupMarksSeatsOnceAWindowInAGap: while a Group's rounds read no
// range of seats lapsing lately (an overload: pace.Budget.Overloaded), a
// seat last read as another's live lease may lapse unseen, so the seats
// it does not lead are marked to be read again by key: when the gap is
// found, and again an expiry window after the last marking while it
// lasts, not in every round. A seat read since the last marking stays at
// rest until then. The members marked go from rest to the pool, each in
// one place only (checkPlaces), and rest again once the rounds read their
// range and their seats. Driven by hand, without Run, on SQLite.
func TestGroupMarksSeatsOnceAWindowInAGap(t *testing.T) {
	ctx := electorCtx(t)
	db := migratedSQLite(t, ctx, "gap")
	const n = 12
	nss := heldByAnother(t, ctx, db, "gap.", n) // another candidate leads every seat for an hour
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss}, WithLogger(silent))
	if err != nil {
		t.Fatal(err)
	}
	// round runs one round, overloaded when asked (the seats kept bounded
	// and the attempts shed, as after heavy rounds), and checks the
	// members' places after it.
	round := func(overloaded bool) {
		t.Helper()
		if overloaded {
			g.box.lock()
			g.pace.Heavy(1000, time.Second, time.Second)
			g.pace.Round(true)
			g.box.unlock()
		}
		if err := g.fullRound(ctx, causeTick); err != nil {
			t.Fatal(err)
		}
		g.box.lock()
		defer g.box.unlock()
		checkPlaces(t, g)
	}
	resting := func() int {
		g.box.lock()
		defer g.box.unlock()
		return g.active.resting
	}
	for i := 0; resting() < n; i++ {
		if i == 20 {
			t.Fatalf("after %d rounds, %d of %d members at rest, want all", i, resting(), n)
		}
		round(false)
	}

	// The last range read an expiry window and more ago: a gap.
	g.box.lock()
	g.ranged = time.Now().Add(-g.base.expire - time.Second)
	g.box.unlock()
	round(true)
	g.box.lock()
	marked := g.remarked
	pooled, rest := len(g.active.pool), g.active.resting
	g.box.unlock()
	if pooled != n || rest != 0 || marked.IsZero() {
		t.Fatalf("the round that found the gap: %d pooled, %d at rest, marked at %v; want all %d pooled", pooled, rest, marked, n)
	}

	// A seat read again by key since (as an attempt reads it) rests, and
	// stays at rest through the rounds within the window.
	g.box.lock()
	mem := g.members[nss[0]]
	mem.reread = false
	g.placeLocked(mem)
	g.box.unlock()
	for range 3 {
		round(true)
	}
	g.box.lock()
	if mem.place != placedResting || mem.reread || !g.remarked.Equal(marked) {
		t.Errorf("rounds within the window after the marking: the seat read since is placed %d (reread %v), marked again at %v; want it at rest, unmarked",
			mem.place, mem.reread, g.remarked)
	}
	// An expiry window after the marking, with the gap lasting, it is
	// marked again.
	g.remarked = g.remarked.Add(-g.base.expire - time.Millisecond)
	g.box.unlock()
	round(true)
	g.box.lock()
	if mem.place != placedPooled || !mem.reread {
		t.Errorf("a window after the marking: the seat read since is placed %d (reread %v), want it pooled to be read again", mem.place, mem.reread)
	}
	g.box.unlock()

	// Once the rounds read their range again, the seats are read and rest.
	for i := 0; resting() < n; i++ {
		if i == 20 {
			t.Fatalf("after the gap, %d rounds: %d of %d members at rest, want all", i, resting(), n)
		}
		round(false)
	}
}

// checkPlaces fails t unless every member of g is in the one place it
// says (group_active.go): on the list once, in the pool at its index, or
// counted at rest; g.box is held.
func checkPlaces(t *testing.T, g *Group) {
	t.Helper()
	listed := map[*member]int{}
	for _, mem := range g.active.list {
		listed[mem]++
	}
	rest := 0
	for ns, mem := range g.members {
		switch mem.place {
		case placedListed:
			if listed[mem] != 1 {
				t.Errorf("%s: listed, found on the list %d times", ns, listed[mem])
			}
		case placedPooled:
			if mem.poolAt >= len(g.active.pool) || g.active.pool[mem.poolAt] != mem {
				t.Errorf("%s: pooled at %d, not there", ns, mem.poolAt)
			}
		case placedResting:
			rest++
		}
		if mem.place != placedListed && listed[mem] != 0 {
			t.Errorf("%s: placed %d, found on the list too", ns, mem.place)
		}
	}
	if rest != g.active.resting {
		t.Errorf("%d members at rest, counted %d", rest, g.active.resting)
	}
	for i, mem := range g.active.pool {
		if mem.place != placedPooled || mem.poolAt != i {
			t.Errorf("%s: in the pool at %d, placed %d at %d", mem.ns, i, mem.place, mem.poolAt)
		}
	}
}
