package election

import (
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/pace"
)

// readsLocked is how many of the free seats (or those not read lately) a
// round reads by key, of budget. In an overload (the seats kept bounded:
// carryLocked), most seats are free, and every process would read
// thousands in every round: twice the room at most, and none while the
// attempts are shed, since none would be tried. A balanced Group below
// its share reads at most twice the room the share leaves, and never
// fewer than its first round wrote candidate rows (dialect.FirstJoins);
// at its share, atShareReads: at a cold start of 40,000 namespaces x 16
// processes the budget doubled to 32,000 seats read a round, whose
// handling in the process then took longer than the trust window on a
// busy host, and the Group stepped down from every seat
// (docs/performance.md), while a batch takes a few hundred seats a round
// and a Group at its share none. g.box is held.
func (g *Group) readsLocked(budget int) int {
	if g.pace.Overloaded() {
		return 0
	}
	n := 2 * max(g.pace.Room(g.box.leading), 1)
	if g.cfg.Balance && g.share > 0 {
		if room := g.shareLocked() - g.box.leading; room > 0 {
			n = min(n, max(dialect.FirstJoins(g.base.d), 2*room))
		} else {
			n = min(n, atShareReads)
		}
	}
	return min(budget, n)
}

// atShareReads is how many free seats a balanced Group at its share reads
// by key in a round: enough to see whether seats stay free, which it then
// takes one above the share (balanceLocked), not thousands it would not
// try.
const atShareReads = 64

// rangeLocked is the most seats each reading of a round's range returns
// on PostgreSQL (dialect.RoundIn.Range): as many as the round may read by
// key (readsLocked), and never fewer than its first round wrote candidate
// rows. At 40,000 namespaces x 16 processes, a process stepping down in an
// overload put its 2,500 seats in every other process's range, and ranges
// of 14,000-28,000 seats followed, whose handling alone outlasted the
// trust window (docs/performance.md). A range cut short counts as none
// for the gap (fullRound): once none was whole for an expiry window, the
// seats not led are read again by key, in steps. g.box is held.
func (g *Group) rangeLocked() int {
	return max(g.readsLocked(pace.Max), dialect.FirstJoins(g.base.d))
}
