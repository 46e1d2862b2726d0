package electiontest

import (
	"sync"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// Observer is an election.Observer that records in a Recorder what the
// Electors and Groups of an Election lead, with no code in their
// callbacks: every lease a round or attempt granted or renewed, and the
// release of every term its holder may give up before its lease ends.
// Pass it to election.WithObserver, or embed it in an observer of your own
// (a test of yours that also counts events) and call its methods from
// yours.
//
// It records a release when a leadership stops for any reason but StopLost
// and StopVacated: after Resign, Leave, balancing and shutdown the driver
// vacates the term, and after a step-down it may (a renewal that landed
// after the trust window leaves a live lease, which a Group's later round
// leads again in the same term, or a Leave or shutdown vacates). A term
// lost to another leader, to a new term or to its lease's expiry, or
// vacated by another process, is not released here: a lost lease must have
// ended before the next term began, and the Checker looks; whoever vacates
// another's term (an operator's VacateSeat or VacateLease, an
// UnregisterCandidate) records that release with Released or
// ReleasedBetween. It also records a release for a lease granted or renewed
// that no leadership of the candidate holds (a grant that came during a
// give-up, or a renewal that landed after its leadership ended): the driver
// vacates it or lets it lapse.
//
// Recording releases here rather than in the leader's work matters for a
// Group: it may hand a namespace over before the OnStartedLeading of that
// leadership has run, and then never runs it, so work that records its
// release when its context ends does not hear of that term, and the
// Checker reports an overlap that did not happen.
//
// Observations of one participant must be recorded in order, under a name
// of its own: an Election's observer is shared by every Elector and Group
// made from it, so give each participant an Election of its own, with an
// Observer of its own.
type Observer struct {
	election.NopObserver
	rec  *Recorder
	name string

	mu      sync.Mutex
	leading map[leaderKey]int64 // the term each candidate leads in each namespace
}

type leaderKey struct {
	ns string
	id uuid.UUID
}

// NewObserver returns an Observer that records into rec under the
// observer name name (see Recorder.Observe).
func NewObserver(rec *Recorder, name string) *Observer {
	return &Observer{rec: rec, name: name, leading: map[leaderKey]int64{}}
}

// Attempt records the lease of a round or attempt that led or renewed,
// or that wrote the candidate's lease too late to lead by it
// (OutcomeSuperseded), and its release when no leadership of the
// candidate holds its term.
func (o *Observer) Attempt(a election.Attempt) {
	switch a.Outcome {
	case election.OutcomeLed, election.OutcomeRenewed:
	case election.OutcomeSuperseded:
		if !a.Lease.HeldBy(a.Candidate) {
			return
		}
	default:
		return
	}
	o.rec.Observe(o.name, a.Lease)
	o.mu.Lock()
	led := o.leading[leaderKey{a.Lease.Namespace, a.Candidate}]
	o.mu.Unlock()
	if led != a.Lease.Term {
		o.rec.Released(a.Lease)
	}
}

// LeadershipStarted records the lease a leadership starts under.
func (o *Observer) LeadershipStarted(l election.Leadership) {
	o.mu.Lock()
	o.leading[leaderKey{l.Namespace, l.Candidate}] = l.Lease.Term
	o.mu.Unlock()
	o.rec.Observe(o.name, l.Lease)
}

// LeadershipStopped records the release of a term its holder may vacate
// (every reason but StopLost and StopVacated).
func (o *Observer) LeadershipStopped(l election.Leadership) {
	o.mu.Lock()
	delete(o.leading, leaderKey{l.Namespace, l.Candidate})
	o.mu.Unlock()
	switch l.Reason {
	case election.StopLost, election.StopVacated:
	default:
		o.rec.Released(l.Lease)
	}
}
