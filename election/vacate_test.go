package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// stopTally is an Observer that keeps the reasons leadership stopped for.
type stopTally struct {
	election.NopObserver
	mu      sync.Mutex
	reasons []election.StopReason
}

func (s *stopTally) LeadershipStopped(l election.Leadership) {
	s.mu.Lock()
	s.reasons = append(s.reasons, l.Reason)
	s.mu.Unlock()
}

func (s *stopTally) has(r election.StopReason) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, got := range s.reasons {
		if got == r {
			return true
		}
	}
	return false
}

// An operator's VacateLease moves leadership to another live candidate:
// the old leader stops at once (reason vacated) and sits out, its Guard
// fails, the term advances, and the history records the old term as
// vacated. The candidates run on pools of their own, as in two processes.
func TestVacateLeaseMovesLeadership(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			dsn, db := testdb.Shared(t, tg)
			ns := testdb.Namespace(t)
			const interval = 150 * time.Millisecond
			type member struct {
				el    *election.Elector
				e     *election.Election
				stops *stopTally
				done  chan error
			}
			start := func() member {
				m := member{stops: &stopTally{}, done: make(chan error, 1)}
				m.e = mustElection(t, testdb.OpenDSN(t, dsn), ns, election.WithExpire(3*time.Second), election.WithObserver(m.stops))
				el, err := m.e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval})
				must(t, "NewElector", err)
				m.el = el
				go func() { m.done <- el.Run(ctx) }()
				return m
			}
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s", what)
					}
				}
			}
			a := start()
			waitFor("a to lead", a.el.IsLeader)
			b := start()
			op := mustElection(t, db, ns)
			waitFor("b to be a candidate", func() bool {
				ids, err := op.ListCandidates(ctx)
				return err == nil && len(ids) == 2
			})
			old := a.el.Observed()
			if !old.HeldBy(a.el.ID()) {
				t.Fatalf("a leads but its lease is %+v", old)
			}

			// A lease that is not the seat's is refused and changes nothing.
			stale := old
			stale.Term++
			if _, err := op.VacateLease(ctx, stale); !errors.Is(err, election.ErrNotLeader) {
				t.Fatalf("VacateLease(a later term) = %v, want ErrNotLeader", err)
			}
			if _, err := op.VacateLease(ctx, election.Lease{Namespace: ns}); !errors.Is(err, election.ErrInvalidOption) {
				t.Fatalf("VacateLease(vacant lease) = %v, want ErrInvalidOption", err)
			}
			if cur, err := op.Leader(ctx); err != nil || cur.Leader != old.Leader || cur.Term != old.Term {
				t.Fatalf("after refused VacateLease calls the seat is %+v, %v; want a's term %d", cur, err, old.Term)
			}

			got, err := op.VacateLease(ctx, old)
			must(t, "VacateLease", err)
			if got.Leader != old.Leader || got.Term != old.Term {
				t.Fatalf("VacateLease = %+v, want a's term %d", got, old.Term)
			}
			if err := op.Guard(ctx, old); !errors.Is(err, election.ErrNotLeader) {
				t.Fatalf("Guard(the vacated lease) = %v, want ErrNotLeader", err)
			}
			// a stops leading: woken by the vacate where the database
			// pushes it (vacated), else at its next round, which finds the
			// term vacated or already taken by b (lost).
			waitFor("a to stop leading", func() bool {
				return a.stops.has(election.StopVacated) || a.stops.has(election.StopLost)
			})
			if a.el.IsLeader() {
				t.Fatal("a still acts as leader after it reported the end of its term")
			}
			waitFor("b to lead", b.el.IsLeader)
			now, err := op.Leader(ctx)
			must(t, "Leader", err)
			if now.Leader != b.el.ID() || now.Term != old.Term+1 {
				t.Fatalf("after the vacate the seat is %+v, want b in term %d", now, old.Term+1)
			}
			h, err := op.History(ctx, 10)
			must(t, "History", err)
			var ended bool
			for _, r := range h {
				if r.Term == old.Term {
					ended = true
					wantTerm(t, "the vacated term", r, old.Term, a.el.ID(), election.EndVacated)
				}
			}
			if !ended {
				t.Fatalf("term %d missing from the history %+v", old.Term, h)
			}
			// a stays a candidate and does not take the seat back.
			deadline := time.Now().Add(4 * interval)
			for time.Now().Before(deadline) {
				if l, err := op.Leader(ctx); err != nil || l.Leader != b.el.ID() {
					t.Fatalf("the seat moved on from b: %+v, %v", l, err)
				}
				time.Sleep(interval / 2)
			}
			cancel()
			for _, m := range []member{a, b} {
				if err := <-m.done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}
		})
	}
}

// The only candidate whose term an operator vacated takes the seat back,
// in a new term, after sitting out: stopped with reason vacated, and the
// seat stays vacant (by the database clock, in the history) for at least
// most of an interval.
func TestVacatedLoneLeaderReturns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		ns := testdb.Namespace(t)
		stops := &stopTally{}
		e := mustElection(t, db, ns, election.WithExpire(2*time.Second), election.WithObserver(stops))
		const interval = 100 * time.Millisecond
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval})
		must(t, "NewElector", err)
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		for deadline := time.Now().Add(10 * time.Second); !el.IsLeader(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("timed out waiting for leadership")
			}
		}
		old := el.Observed()
		if _, err := mustElection(t, db, ns).VacateLease(ctx, old); err != nil {
			t.Fatalf("VacateLease: %v", err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if l := el.Observed(); el.IsLeader() && l.Term > old.Term {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the lone candidate did not lead again; lease %+v", el.Observed())
			}
		}
		if !stops.has(election.StopVacated) {
			t.Fatalf("stop reasons %v, want %q", stops.reasons, election.StopVacated)
		}
		h, err := e.History(ctx, 10)
		must(t, "History", err)
		var ended, next election.TermRecord
		for _, r := range h {
			switch r.Term {
			case old.Term:
				ended = r
			case old.Term + 1:
				next = r
			}
		}
		if ended.EndReason != election.EndVacated || next.Leader != el.ID() {
			t.Fatalf("history %+v: want term %d vacated and term %d led by the same candidate", h, old.Term, old.Term+1)
		}
		// The sit-out: a tick that only observes, then a round that elects,
		// each at least 0.8 of the interval after the one before.
		if gap := next.AcquiredAt.Sub(ended.EndedAt); gap < interval {
			t.Fatalf("the candidate took its seat back %v after the vacate, want at least %v", gap, interval)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}
