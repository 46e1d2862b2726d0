package electiontest_test

import (
	"testing"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
)

// TestObserver feeds an Observer the events a Group reports and checks
// which term endings the Checker then trusts: a term handed over (or left,
// resigned, shut down, stepped down from) may end before its lease, even
// when the leader's work never ran; a term lost must not overlap the next.
func TestObserver(t *testing.T) {
	const ns = "jobs"
	started := func(l election.Lease) election.Leadership {
		return election.Leadership{Namespace: ns, Candidate: l.Leader, Lease: l}
	}
	stopped := func(l election.Lease, why election.StopReason) election.Leadership {
		return election.Leadership{Namespace: ns, Candidate: l.Leader, Lease: l, Reason: why}
	}
	attempt := func(l election.Lease, o election.Outcome) election.Attempt {
		return election.Attempt{Namespace: ns, Candidate: l.Leader, Outcome: o, Lease: l}
	}
	// Term 2 is b's, granted at 0 with a lease until 1000 and renewed at 2
	// until 1002; term 3 is c's, granted at 4, before term 2's lease ends.
	t2, t2renewed, t3 := lease(ns, b, 2, 0, 1000), lease(ns, b, 2, 0, 1002), lease(ns, c, 3, 4, 1004)
	for _, tc := range []struct {
		name    string
		events  func(bo *electiontest.Observer)
		overlap bool
	}{
		{"handed over before its work ran", func(bo *electiontest.Observer) {
			bo.LeadershipStarted(started(t2))
			bo.Attempt(attempt(t2, election.OutcomeLed))
			bo.Attempt(attempt(t2renewed, election.OutcomeRenewed))
			bo.LeadershipStopped(stopped(t2renewed, election.StopBalanced))
		}, false},
		{"stepped down", func(bo *electiontest.Observer) {
			bo.LeadershipStarted(started(t2))
			bo.LeadershipStopped(stopped(t2, election.StopSteppedDown))
			bo.Attempt(attempt(t2renewed, election.OutcomeSuperseded)) // the late renewal
		}, false},
		{"granted during a give-up, never led", func(bo *electiontest.Observer) {
			bo.Attempt(attempt(t2renewed, election.OutcomeSuperseded))
		}, false},
		{"lost", func(bo *electiontest.Observer) {
			bo.LeadershipStarted(started(t2))
			bo.Attempt(attempt(t2renewed, election.OutcomeRenewed))
			bo.LeadershipStopped(stopped(t2renewed, election.StopLost))
		}, true},
		{"vacated by another process", func(bo *electiontest.Observer) {
			bo.LeadershipStarted(started(t2))
			bo.LeadershipStopped(stopped(t2, election.StopVacated))
		}, true},
		{"still leading", func(bo *electiontest.Observer) {
			bo.LeadershipStarted(started(t2))
			bo.Attempt(attempt(t2, election.OutcomeLed))
			bo.Attempt(attempt(t2renewed, election.OutcomeRenewed))
			bo.Attempt(attempt(t2renewed, election.OutcomeFollower)) // not recorded
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := electiontest.NewRecorder()
			tc.events(electiontest.NewObserver(rec, "b"))
			co := electiontest.NewObserver(rec, "c")
			co.LeadershipStarted(started(t3))
			co.Attempt(attempt(t3, election.OutcomeLed))
			res := rec.Check()
			if got := res.Count(electiontest.Overlap); got != map[bool]int{false: 0, true: 1}[tc.overlap] {
				t.Errorf("%d overlaps (%v), want overlap %v", got, res, tc.overlap)
			}
			if n := res.Total() - res.Count(electiontest.Overlap); n != 0 {
				t.Errorf("other violations: %v", res)
			}
			h := rec.History()
			if h.Observations == 0 {
				t.Error("nothing observed")
			}
		})
	}
}
