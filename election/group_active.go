package election

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

// The members a round takes in. A member at rest (restsLocked: its
// candidate row written, its seat last read as another's live lease, and
// nothing asked of it) sends nothing in a round: the round's range read
// finds its seat when that lease nears its end or the seat is freed, and
// a crashed leader's edge or a handoff wakes the attempter for it. A
// member whose seat is free, or owed a reading, and which the Group does
// not lead or try (freeLocked) waits in a pool, of which a round reads as
// many as it may (readsLocked), chosen at random. Neither is on the list
// a round walks, so that a round's work in the process follows the seats
// it concerns (those led, being joined, and those read), not every
// namespace joined: at 40,000 namespaces a round that walked every member
// spent most of a process's CPU there (docs/performance.md). Whatever may
// change that puts the member back on the list (activateLocked): an
// attempt, a reading that shows the seat otherwise (placeLocked), a lease
// edge left untried, Join, Leave, and the rounds' lapse and gap.

// placement is where a member is: on the list a round walks, at rest, in
// the pool of free seats, or nowhere (being left).
type placement uint8

const (
	placedNowhere placement = iota
	placedListed
	placedResting
	placedPooled
)

// actives are the members a round takes in.
type actives struct {
	list    []*member // walked every round; sorted by namespace up to sorted (activeLocked)
	buf     []*member // activeLocked's merge buffer
	sorted  int
	resting int       // members at rest
	pool    []*member // members whose free seats a round may read (member.poolAt)
}

// byNamespace orders members by namespace.
func byNamespace(a, b *member) int { return strings.Compare(a.ns, b.ns) }

// idleLocked reports whether the Group neither leads nor may reclaim
// mem's seat, tries it or leaves it, and its candidate row is written.
// g.box is held.
func (g *Group) idleLocked(mem *member) bool {
	return mem.written && !mem.leaving && !mem.attempting && mem.m.cur == nil && mem.m.reclaim == 0
}

// restsLocked reports whether mem may rest: it is idle and its seat was
// last read as another candidate's lease, with no reading of it owed
// (reread). g.box is held.
func (g *Group) restsLocked(mem *member) bool {
	l := mem.m.last
	return g.idleLocked(mem) && mem.seen && !mem.reread && !l.Vacant() && l.Leader != g.id
}

// freeLocked reports whether mem may wait in the pool: it is idle and its
// seat was never read, read free, owed a reading, or last read as the
// Group's own lease, which it no longer leads (carryLocked). g.box is
// held.
func (g *Group) freeLocked(mem *member) bool {
	l := mem.m.last
	return g.idleLocked(mem) && (!mem.seen || l.Vacant() || mem.reread || l.Leader == g.id)
}

// unplaceLocked takes mem off the rest or the pool; g.box is held.
func (g *Group) unplaceLocked(mem *member) {
	a := &g.active
	switch mem.place {
	case placedResting:
		a.resting--
	case placedPooled:
		last := len(a.pool) - 1
		moved := a.pool[last]
		a.pool[mem.poolAt], moved.poolAt = moved, mem.poolAt
		a.pool[last] = nil
		a.pool = a.pool[:last]
	}
	mem.place = placedNowhere
}

// activateLocked puts mem on the list a round walks, if it is not there;
// g.box is held, or the Group is not shared yet.
func (g *Group) activateLocked(mem *member) {
	if mem.place == placedListed {
		return
	}
	g.unplaceLocked(mem)
	mem.place = placedListed
	g.active.list = append(g.active.list, mem)
}

// placeLocked puts mem, which is off the list, at rest, in the pool, or
// on the list, as its state is now; g.box is held.
func (g *Group) placeLocked(mem *member) {
	switch {
	case g.restsLocked(mem):
		if mem.place != placedResting {
			g.unplaceLocked(mem)
			mem.place = placedResting
			g.active.resting++
		}
	case g.freeLocked(mem):
		if mem.place != placedPooled {
			g.unplaceLocked(mem)
			mem.place, mem.poolAt = placedPooled, len(g.active.pool)
			g.active.pool = append(g.active.pool, mem)
		}
	default:
		g.activateLocked(mem)
	}
}

// pickPooledLocked returns n members of the pool chosen at random (all
// when it holds no more); g.box is held.
func (g *Group) pickPooledLocked(n int) []*member {
	pool := g.active.pool
	if n >= len(pool) {
		return pool
	}
	for i := range n {
		j := i + rand.IntN(len(pool)-i)
		pool[i], pool[j] = pool[j], pool[i]
		pool[i].poolAt, pool[j].poolAt = i, j
	}
	return pool[:n]
}

// activeLocked returns the listed members in namespace order: those added
// since the last call are sorted and merged in. g.box is held.
func (g *Group) activeLocked() []*member {
	a, n := g.active.list, g.active.sorted
	if n == len(a) {
		return a
	}
	tail := a[n:]
	slices.SortFunc(tail, byNamespace)
	if n > 0 && byNamespace(a[n-1], tail[0]) > 0 {
		head, merged := a[:n], g.active.buf[:0]
		for len(head) > 0 && len(tail) > 0 {
			if byNamespace(head[0], tail[0]) <= 0 {
				merged, head = append(merged, head[0]), head[1:]
			} else {
				merged, tail = append(merged, tail[0]), tail[1:]
			}
		}
		merged = append(append(merged, head...), tail...)
		clear(a)
		g.active.list, g.active.buf = merged, a[:0]
	}
	g.active.sorted = len(g.active.list)
	return g.active.list
}

// keepActiveLocked ends a round's walk of the listed members (fullRound):
// kept, a prefix of the list in the same order, stays; the others were
// left off, at rest or gone. g.box is held.
func (g *Group) keepActiveLocked(kept int) {
	a := &g.active
	clear(a.list[kept:a.sorted])
	a.list = append(a.list[:kept], a.list[a.sorted:]...)
	a.sorted = kept
}

// inRound reports whether the round of stamp is for mem: it took mem in,
// or mem is at rest or in the pool; and mem is not being left. g.box is
// held.
func (mem *member) inRound(stamp uint64) bool {
	return !mem.leaving && (mem.round == stamp || mem.place == placedResting || mem.place == placedPooled)
}

// failOffLocked hands r, the failure of the round of stamp, to the
// members at rest or in the pool that it did not read: the round was for
// them too, and an observer counts its failure in every namespace. Without
// an observer it does nothing: the failure changes nothing else in them.
// g.box is held.
func (g *Group) failOffLocked(stamp uint64, r result) {
	if g.base.observer == nil {
		return
	}
	for _, mem := range g.members {
		if mem.round != stamp && mem.inRound(stamp) {
			mem.m.settleLocked(r)
		}
	}
}

// sampleLocked returns, with Balance, the first namespaces in order that
// the round of stamp is for (taken in, at rest or in the pool), at most sampleSize:
// the Groups of a fleet that join the same namespaces count the live
// candidates of the same ones. g.box is held.
func (g *Group) sampleLocked(stamp uint64) []string {
	var out []string
	for _, mem := range g.sortedLocked() {
		if len(out) == sampleSize {
			break
		}
		if mem.inRound(stamp) {
			out = append(out, mem.ns)
		}
	}
	return out
}

// leadsAll reports whether the Group leads every namespace it joined
// (driverLoop). A member being left leads nowhere (closeLocked).
func (g *Group) leadsAll() bool {
	g.box.lock()
	defer g.box.unlock()
	return g.box.leading >= len(g.members)-g.leavers
}

// sortedLocked returns the members in namespace order, sorted again
// only after a Join or a Leave changed them. g.box is held.
func (g *Group) sortedLocked() []*member {
	if !g.ordered {
		g.sorted = slices.SortedFunc(maps.Values(g.members), byNamespace)
		g.ordered = true
	}
	return g.sorted
}
