package election

import (
	"math/rand/v2"
	"time"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/pace"
)

// readsLocked is how many of the free seats (or those not read lately) a
// round reads by key, of budget. In an overload (the seats kept bounded:
// carryLocked), most seats are free, and every process would read
// thousands in every round: twice the room at most, and none while the
// attempts are shed, since none would be tried. A balanced Group below
// its share reads at most twice the room the share leaves, and at its
// share atShareReads: at a cold start of 40,000 namespaces x 16 processes
// the budget doubled to 32,000 seats read a round, whose handling in the
// process then took longer than the trust window on a busy host, and the
// Group stepped down from every seat (docs/performance.md), while a batch
// takes a few hundred seats a round and a Group at its share none. Below
// its share it reads no fewer than its first round wrote candidate rows
// (dialect.FirstJoins) until it has led its share once (a cold start,
// whose free seats are mostly taken by others by the time they are read),
// and no fewer than atShareReads after: at 40,000 x 16 the 15 processes
// left after a crash, 167 seats below the new share each, read 4,096 seats
// a round, in rounds then too slow for their attempts (paceLocked). And a
// round reads no more than it can afford (affordLocked). g.box is held.
func (g *Group) readsLocked(budget int) int {
	if g.pace.Overloaded() {
		return 0
	}
	n := 2 * max(g.pace.Room(g.box.leading), 1)
	if g.cfg.Balance && g.share > 0 {
		if room := g.shareLocked() - g.box.leading; room > 0 {
			least := dialect.FirstJoins(g.base.d)
			if g.filled {
				least = atShareReads
			}
			n = min(n, max(least, 2*room))
		} else {
			n = min(n, atShareReads)
		}
	}
	return min(budget, n, g.affordLocked())
}

// affordLocked is the most seats a round may read beside those it renews,
// by key or in its range: as many as keep the round, its handling in the
// process included, within half of heavyRound at what a seat cost the
// last rounds (seatCost), and never fewer than atShareReads; no bound
// before a round has measured it. At 40,000 x 16 on two cores a seat cost
// 40-90 µs, and rounds that renewed 2,400 seats while reading 4,096 by
// key and 5,000 in their range took 1.0-2.0 s: their Groups stepped down
// from every seat, and the seats freed were in every other Group's range.
// g.box is held.
func (g *Group) affordLocked() int {
	if g.seatCost <= 0 {
		return pace.Max
	}
	n := int(g.t.heavyRound()/2/g.seatCost) - g.box.leading
	return min(max(n, atShareReads), pace.Max)
}

// costRows is the fewest seats a round returns for its time to count in
// seatCost (noteCostLocked): below, the round trip's own time dominates.
const costRows = 512

// noteCostLocked counts a round that wrote no candidate row, returned
// seats seats, and took d from its start to the end of its handling, in
// the cost of a seat (affordLocked); g.box is held.
func (g *Group) noteCostLocked(d time.Duration, seats int) {
	if seats < costRows {
		return
	}
	c := d / time.Duration(seats)
	if g.seatCost == 0 {
		g.seatCost = c
		return
	}
	g.seatCost = (3*g.seatCost + c) / 4
}

// atShareReads is how many free seats a balanced Group at its share reads
// by key in a round: enough to see whether seats stay free, which it then
// takes one above the share (balanceLocked), not thousands it would not
// try.
const atShareReads = 64

// rangeLocked is the most seats each reading of a round's range returns
// on PostgreSQL (dialect.RoundIn.Range): as many as the round may read by
// key (readsLocked), and never fewer than its first round wrote candidate
// rows unless the round cannot afford them (affordLocked). At 40,000
// namespaces x 16 processes, a process stepping down in an
// overload put its 2,500 seats in every other process's range, and ranges
// of 14,000-28,000 seats followed, whose handling alone outlasted the
// trust window (docs/performance.md). A range cut short counts as none
// for the gap (fullRound): once none was whole for an expiry window, the
// seats not led are read again by key, in steps. g.box is held.
func (g *Group) rangeLocked() int {
	return max(g.readsLocked(pace.Max), min(dialect.FirstJoins(g.base.d), g.affordLocked()))
}

// someOf returns at most n of the free seats nss, chosen at random when
// there are more: a round reads no more free seats than it may write
// candidate rows (pace.Budget.Joins), so that a fleet whose seats are
// mostly free (a cold start, a database that could not keep up) reads them
// in steps the rounds can afford, each process its own random share,
// instead of every process reading every free seat in every round: rounds
// too slow to make attempts in were then spent reading seats that no
// attempt could take. The seats left out are read in later rounds, and
// those whose lease ends are found by the round's range all the same.
func someOf(nss []string, n int) []string {
	if len(nss) <= n {
		return nss
	}
	for i := range n {
		j := i + rand.IntN(len(nss)-i)
		nss[i], nss[j] = nss[j], nss[i]
	}
	return nss[:n]
}
