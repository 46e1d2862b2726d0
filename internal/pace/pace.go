// Package pace is the budget of a Group's attempts on free seats: the
// rounds (and the renewals in them) always run, and the attempts are shed
// first when the database is slow.
//
// A round that is slow (the caller judges: package election takes a
// quarter of the interval, or a tenth of the trust window when longer) or
// failed stops the attempts until a round is quick again;
// from there the budget per interval doubles with each quick round, and
// halves when an attempt fails. So a fleet too large for its database, or
// a server slowed or paused for a while, sends its rounds and little else:
// leaders whose renewals still answer in time keep their seats, and the
// free seats are taken once the rounds are quick again, without a retry
// storm. A round that is slow but still leaves the renewals their cadence
// (Slowed; the caller judges) keeps one attempt a round, a batch take of
// FirstBatch seats where one statement takes many: a Group that leads
// thousands of seats on a busy database has rounds that are never quick,
// and took no free seat at all, not even those of a crashed process.
//
// Where one statement takes many seats (a batch take), the seats per batch
// grow the same way: FirstBatch after a slow round or at the start, twice
// as many after each quick round. A fleet that starts together, or comes
// back after a stall, adds its leases in steps the rounds can renew,
// rather than each process taking its whole share in one statement whose
// renewals then miss the trust window.
//
// A Group's first rounds write its candidate rows, one per namespace
// joined: at most a first number in a round at the start (New's; the
// database's dialect chooses it), twice as many after each quick round,
// half as many (never fewer than the first) after a slow one. A fleet of many namespaces that starts together writes its
// rows over a few rounds, each quick enough to renew in, rather than each
// process writing every row in its first round, a round that outlasts the
// trust window when many start at once, fails and is sent again.
//
// Renewals are never shed, but a Group may hold more seats than the
// database can renew in time: when a round that answered took so long
// that the next renewal may miss the trust window (the caller judges:
// three eighths of it), Heavy bounds the seats the Group keeps (Carry) to
// those a round of the time aimed at would return at that round's time
// per seat, and the Group stops leading those above the bound. From
// there the bound grows by a thirty-second with each quick round, so a fleet too large for its database leads what the
// database can renew, and reports the rest, rather than stepping down
// from every seat at once and taking them all back again.
//
// A Budget is not safe for concurrent use: its owner's lock guards it.
package pace

import (
	"context"
	"time"
)

// Max is the budget of a healthy Group: as many attempts as there are free
// seats, in practice.
const Max = 1 << 16

// FirstBatch is the most seats a batch take may take at the start and
// after a slow round.
const FirstBatch = 128

// Budget is the attempts allowed per round interval (a batch take counts
// one) and those spent since the last round, the seats a batch may take,
// and the candidate rows the next round may write.
type Budget struct {
	allowed, used int
	slowed        bool // the last round was slow, within the renewals' cadence (Slowed)
	batch, took   int  // seats per round for batch takes, and taken since the last round
	joins, first  int  // candidate rows the next round may write, and at the start
	carry         int  // the most seats the Group keeps; 0: no bound
}

// New returns a healthy budget, Max attempts, whose batches begin at
// FirstBatch seats and whose rounds write firstJoins candidate rows at
// first (at least one).
func New(firstJoins int) Budget {
	firstJoins = max(firstJoins, 1)
	return Budget{allowed: Max, batch: FirstBatch, joins: firstJoins, first: firstJoins}
}

// Round updates the budget after a round, slow or not. It reports whether
// a slow round has just begun the shedding (attempts were allowed before
// it), for the caller to say so once.
func (b *Budget) Round(slow bool) (began bool) {
	b.used, b.took, b.slowed = 0, 0, false
	switch {
	case slow:
		began = b.allowed > 0
		b.allowed, b.batch = 0, FirstBatch
		b.joins = max(b.joins/2, b.first)
		return began
	case b.allowed == 0:
		b.allowed = 1
		b.growCarry()
	default:
		b.allowed = min(2*b.allowed, Max)
		b.batch = min(2*b.batch, Max)
		b.growCarry()
	}
	b.joins = min(2*b.joins, Max)
	return began
}

// Slowed updates the budget after a round that was slow, though not so
// slow that the renewals miss their cadence: one attempt until the next
// round (a batch take counts one) of at most FirstBatch seats, and
// candidate rows halved as after a slow round. A quick round then doubles
// the budget from there; the bound on the seats kept does not grow.
func (b *Budget) Slowed() {
	b.used, b.took, b.slowed = 0, 0, true
	b.allowed, b.batch = 1, FirstBatch
	b.joins = max(b.joins/2, b.first)
}

// growCarry raises the bound on the seats kept after a quick round, by a
// thirty-second (one seat at least), and lifts it at Max.
func (b *Budget) growCarry() {
	if b.carry == 0 {
		return
	}
	if b.carry += max(b.carry/32, 1); b.carry >= Max {
		b.carry = 0
	}
}

// Heavy bounds the seats kept after a round that answered in d, too slow
// for the renewals to keep their cadence: to seats (those the round
// returned, renewed or read) times target / d, one at least, never above
// a bound already set. It returns the bound, and whether this round
// lowered it.
func (b *Budget) Heavy(seats int, d, target time.Duration) (bound int, lowered bool) {
	n := seats
	if d > target {
		n = int(int64(seats) * int64(target) / int64(d))
	}
	n = max(n, 1)
	if b.carry != 0 && n >= b.carry {
		return b.carry, false
	}
	b.carry = n
	return n, true
}

// Carries reports whether the Group may hold n seats: within the bound
// Heavy set, if any.
func (b *Budget) Carries(n int) bool { return b.carry == 0 || n <= b.carry }

// Carry is the bound Heavy set on the seats kept; 0 when there is none.
func (b *Budget) Carry() int { return b.carry }

// Room is how many seats a Group holding held may still take within the
// bound Heavy set: Max when there is none.
func (b *Budget) Room(held int) int {
	if b.carry == 0 {
		return Max
	}
	return max(b.carry-held, 0)
}

// Overloaded reports whether the seats kept are bounded and the attempts
// shed: a round then reads no free seat, since none would be tried.
func (b *Budget) Overloaded() bool { return b.carry != 0 && b.allowed == 0 }

// Joins is the most candidate rows the next round may write.
func (b *Budget) Joins() int { return b.joins }

// JoinsGrew doubles the candidate rows the next round may write from
// wrote, the budget of a round that renewed no lease, however slow it was
// short of the renewals' cadence (Round and Slowed halve them), and leaves
// the attempts as Round or Slowed set them: at a cold start every process
// writes its rows at once, and its first rounds are slow with that alone,
// while no lease of its waits on them.
func (b *Budget) JoinsGrew(wrote int) { b.joins = max(b.joins, min(2*wrote, Max)) }

// Batch is the most seats the next batch take may take: what is left of
// this round's.
func (b *Budget) Batch() int { return max(b.batch-b.took, 0) }

// Took counts n seats a batch take is about to take.
func (b *Budget) Took(n int) { b.took += n }

// Spend takes one attempt from the budget, if one is left.
func (b *Budget) Spend() bool {
	if b.used >= b.allowed {
		return false
	}
	b.used++
	return true
}

// Failed halves the budget, and the batch, after a failed attempt.
func (b *Budget) Failed() {
	b.allowed /= 2
	b.batch = max(b.batch/2, FirstBatch)
}

// Quick reports whether the last round was quick, with attempts allowed.
func (b *Budget) Quick() bool { return b.allowed > 0 && !b.slowed }

// Sheds reports whether the attempts are shed: the last round failed or
// was slow (Round), or an attempt failed since with one attempt allowed.
func (b *Budget) Sheds() bool { return b.allowed == 0 }

// Gather returns first and whatever else arrives on ch within d of the
// call, or until ctx ends: signals that fire together, handled as one
// batch.
func Gather[T any](ctx context.Context, ch <-chan T, first T, d time.Duration) []T {
	out := []T{first}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case v := <-ch:
			out = append(out, v)
		case <-t.C:
			return out
		case <-ctx.Done():
			return out
		}
	}
}
