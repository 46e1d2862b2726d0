// Package pace is the budget of a Group's attempts on free seats: the
// rounds (and the renewals in them) always run, and the attempts are shed
// first when the database is slow.
//
// A round that is slow (the caller judges: it took more than a quarter of
// the interval) or failed stops the attempts until a round is quick again;
// from there the budget per interval doubles with each quick round, and
// halves when an attempt fails. So a fleet too large for its database, or
// a server slowed or paused for a while, sends its rounds and little else:
// leaders whose renewals still answer in time keep their seats, and the
// free seats are taken once the rounds are quick again, without a retry
// storm.
//
// A Budget is not safe for concurrent use: its owner's lock guards it.
package pace

// Max is the budget of a healthy Group: as many attempts as there are free
// seats, in practice.
const Max = 1 << 16

// Budget is the attempts allowed per round interval (a batch take counts
// one) and those spent since the last round.
type Budget struct {
	allowed, used int
}

// New returns a healthy budget, Max.
func New() Budget { return Budget{allowed: Max} }

// Round updates the budget after a round, slow or not. It reports whether
// a slow round has just begun the shedding (attempts were allowed before
// it), for the caller to say so once.
func (b *Budget) Round(slow bool) (began bool) {
	b.used = 0
	switch {
	case slow:
		began = b.allowed > 0
		b.allowed = 0
	case b.allowed == 0:
		b.allowed = 1
	default:
		b.allowed = min(2*b.allowed, Max)
	}
	return began
}

// Spend takes one attempt from the budget, if one is left.
func (b *Budget) Spend() bool {
	if b.used >= b.allowed {
		return false
	}
	b.used++
	return true
}

// Failed halves the budget after a failed attempt.
func (b *Budget) Failed() { b.allowed /= 2 }

// Quick reports whether attempts are allowed: the last round was quick.
func (b *Budget) Quick() bool { return b.allowed > 0 }
