package election

import (
	"maps"
	"slices"
	"strings"
)

// The members a round takes in. A member at rest (restsLocked: its
// candidate row written, its seat last read as another's live lease, and
// nothing asked of it) sends nothing in a round: the round's range read
// finds its seat when that lease nears its end or the seat is freed, and
// a crashed leader's edge or a handoff wakes the attempter for it. Such a
// member is left off g.active, so that a round's work in the process
// follows the seats it concerns (those led, free, being joined or to
// read), not every namespace joined: at 40,000 namespaces a round that
// walked every member spent most of a process's CPU there
// (docs/performance.md). Whatever may end the rest puts the member back
// (activateLocked): an attempt, a reading that shows the seat otherwise,
// a lease edge left untried, Join, Leave, and the rounds' lapse and gap.

// actives are the members the rounds take in: all but those at rest.
type actives struct {
	list    []*member // sorted by namespace up to sorted (activeLocked)
	buf     []*member // activeLocked's merge buffer
	sorted  int
	resting int // members at rest, off the list
}

// byNamespace orders members by namespace.
func byNamespace(a, b *member) int { return strings.Compare(a.ns, b.ns) }

// restsLocked reports whether a round may leave mem off: its candidate
// row is written, the Group neither leads nor may reclaim its seat, tries
// it or leaves it, and the seat was last read as another candidate's
// lease, with no reading of it owed (reread). g.box is held.
func (g *Group) restsLocked(mem *member) bool {
	l := mem.m.last
	return mem.written && mem.seen && !mem.reread && !mem.leaving && !mem.attempting &&
		mem.m.cur == nil && mem.m.reclaim == 0 && !l.Vacant() && l.Leader != g.id
}

// activateLocked puts mem on the list of members the rounds take in, if it
// is not there; g.box is held, or the Group is not shared yet.
func (g *Group) activateLocked(mem *member) {
	if mem.listed {
		return
	}
	if mem.resting {
		mem.resting = false
		g.active.resting--
	}
	mem.listed = true
	g.active.list = append(g.active.list, mem)
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

// sampleLocked returns, with Balance, the first namespaces in order that
// the round of stamp is for (taken in, or at rest), at most sampleSize:
// the Groups of a fleet that join the same namespaces count the live
// candidates of the same ones. g.box is held.
func (g *Group) sampleLocked(stamp uint64) []string {
	var out []string
	for _, mem := range g.sortedLocked() {
		if len(out) == sampleSize {
			break
		}
		if !mem.leaving && (mem.round == stamp || mem.resting) {
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
