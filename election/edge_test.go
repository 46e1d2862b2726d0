package election

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// crashable makes r's database calls fail while crashed is set: the
// Elector stops renewing without vacating anything, as after a crash.
func crashable(r *recorder) *atomic.Bool {
	var crashed atomic.Bool
	crash := errors.New("crashed")
	r.el.hooks.call = func(context.Context) error {
		if crashed.Load() {
			return crash
		}
		return nil
	}
	return &crashed
}

// TestElectorFailoverAtLeaseEdge: after the leader stops renewing, a
// follower takes over in a round it started at the end of the lease it
// last read (the lease's remaining time by the database clock, counted on
// its own monotonic clock), not at its next tick. Two crashes, each taken
// over by the other Elector; the follower's interval is long, so ticks
// rarely fall at the edge, and both take-overs at a tick would mean no edge
// round was tried.
func TestElectorFailoverAtLeaseEdge(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			testdb.Raw(t, db).SetMaxOpenConns(2) // no listener: see TestElectorEdgeFindsRenewedLease
			ns := testdb.Namespace(t)
			s := &seq{}
			cfg := ElectorConfig{Interval: time.Second}
			a := newRecordedElector(t, newTestElection(t, db, ns, 2*time.Second), s, cfg)
			b := newRecordedElector(t, newTestElection(t, db, ns, 2*time.Second), s, cfg)
			crashedA, crashedB := crashable(a), crashable(b)
			startRun(t, a.el)
			stA, _ := a.waitLeading(0)
			startRun(t, b.el)
			b.waitRound("B's first round", 0, func(rr roundReport) bool { return rr.err == nil && rr.lease.HeldBy(a.el.ID()) })

			edges := 0
			takeover := func(old, next *recorder, crashed, revived *atomic.Bool, oldTerm int64) event {
				t.Helper()
				revived.Store(false)
				from := old.rounds.len()
				crashed.Store(true)
				old.waitRound("the old leader's first failed call", from, func(rr roundReport) bool { return rr.err != nil })
				last := old.el.Observed()
				won, _ := next.waitRound("the take-over", 0, func(rr roundReport) bool {
					return rr.err == nil && rr.lease.HeldBy(next.el.ID()) && rr.lease.Term > oldTerm
				})
				if won.cause == causeEdge {
					edges++
				} else if won.cause != causeTick {
					t.Errorf("take-over in a %s round, want edge (or, rarely, tick)", won.cause)
				}
				if won.lease.AcquiredAt.Before(last.ExpiresAt) {
					t.Errorf("term %d began at %v, before the old lease expired at %v", won.lease.Term, won.lease.AcquiredAt, last.ExpiresAt)
				}
				t.Logf("take-over in a %s round, %v after the old lease expired by the database clock",
					won.cause, won.lease.AcquiredAt.Sub(last.ExpiresAt))
				st, _ := next.waitEvent("the new leader's OnStartedLeading", 0, func(ev event) bool {
					return ev.kind == "started" && ev.lease.Term == won.lease.Term
				})
				return st
			}
			stB := takeover(a, b, crashedA, crashedB, stA.lease.Term)
			// A comes back as a follower (its retries succeed again), then
			// B stops renewing.
			crashedA.Store(false)
			a.waitRound("A back as a follower", a.rounds.len(), func(rr roundReport) bool { return rr.err == nil && rr.lease.HeldBy(b.el.ID()) })
			takeover(b, a, crashedB, crashedA, stB.lease.Term)
			if edges == 0 {
				t.Error("no take-over at the lease's edge")
			}
		})
	}
}

// TestElectorEdgeFindsRenewedLease: a follower that tries at the end of the
// lease it read, and finds that the leader renewed it meanwhile, goes back
// to its ticks: the round after an edge round is a tick, and it never leads.
// The leader renews each lease late, shortly before it ends, so that the
// follower's edge rounds see the renewal.
func TestElectorEdgeFindsRenewedLease(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			// Two connections: too few for a pool to spare one to listen on
			// PostgreSQL and MySQL, so only the edge and the tick start the
			// follower's rounds. A MySQL wake-up names no namespace: a vacate
			// by another test package on the same database would otherwise
			// wake the follower between its edge round and its tick.
			testdb.Raw(t, db).SetMaxOpenConns(2)
			ns := testdb.Namespace(t)
			const expire = 2 * time.Second
			leader := newTestElection(t, db, ns, expire)
			l := uuid.New()
			clock := readDBClock(t, db)
			lease, err := leader.Elect(electorCtx(t), l)
			if err != nil || !lease.HeldBy(l) {
				t.Fatalf("Elect: %+v, %v", lease, err)
			}
			// The leader renews 500 ms before each lease ends.
			ctx, stop := context.WithCancel(electorCtx(t))
			renewed := make(chan error, 1)
			go func() {
				defer close(renewed)
				for {
					at := clock.local.Add(lease.ExpiresAt.Sub(clock.db)).Add(-500 * time.Millisecond)
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Until(at)):
					}
					next, err := leader.Elect(ctx, l)
					if ctx.Err() != nil {
						return
					}
					if err != nil || next.Term != lease.Term {
						renewed <- errors.Join(err, errors.New("the leader lost its term"))
						return
					}
					lease = next
				}
			}()
			defer func() {
				stop()
				if err := <-renewed; err != nil {
					t.Error(err)
				}
			}()

			f := newRecordedElector(t, newTestElection(t, db, ns, expire), &seq{}, ElectorConfig{Interval: time.Second})
			startRun(t, f.el)
			var edges int
			from := 0
			for edges < 2 {
				rr, i := f.waitRound("an edge round", from, func(rr roundReport) bool { return rr.cause == causeEdge })
				if rr.err != nil || !rr.lease.HeldBy(l) || rr.leading {
					t.Fatalf("edge round: lease %+v, err %v, leading %v; want the renewed lease of the leader", rr.lease, rr.err, rr.leading)
				}
				next, _ := f.waitRound("the round after the edge round", i+1, func(roundReport) bool { return true })
				if next.cause != causeTick {
					t.Errorf("the round after an edge round that found the lease renewed is a %s round, want a tick", next.cause)
				}
				edges++
				from = i + 1
			}
			for _, rr := range f.rounds.snapshot() {
				if rr.leading || rr.lease.HeldBy(f.el.ID()) {
					t.Fatalf("the follower led: %+v", rr)
				}
			}
		})
	}
}

// TestEdgeOncePerLease: a follower tries at most edgeTries times at the
// end of a given lease: first at its end counted from the time the
// reading was sent, then, if the database still showed that lease live
// (its clock decides), at its end counted from the time the answer came,
// which is never early; then it waits for its tick. It does not wait for
// an edge later than its tick. The machine is the same for an Elector and a
// Group: it asks its driver for the try with a timer of the edge's length.
func TestEdgeOncePerLease(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	e := newTestElection(t, db, "edge-once", 2*time.Second)
	el, err := e.NewElector(uuid.New(), ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	el.useClock(clock)
	m := el.m
	other := uuid.New()
	// edge shows the machine a reading of other's lease with left to
	// run counted from the time it was sent, and by counted from the time
	// its answer came, and returns the wait of the try it schedules, if
	// any.
	edge := func(l Lease, left, by time.Duration) (time.Duration, bool) {
		t.Helper()
		now := time.Now()
		e.seen = seatHint{read: true, leader: l.Leader, ends: now.Add(left), endsBy: now.Add(by)}
		el.box.lock()
		defer el.box.unlock()
		before := m.edge
		m.edgeLocked(l, clock.Now())
		if m.edge == before {
			return 0, false
		}
		return clock.last(), true
	}
	exp := time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)
	lease := func(expires time.Time) Lease {
		return Lease{Namespace: "edge-once", Leader: other, Term: 3, ExpiresAt: expires}
	}
	if d, ok := edge(lease(exp), 100*time.Millisecond, 130*time.Millisecond); !ok || d <= 0 || d > 100*time.Millisecond+edgeMargin {
		t.Errorf("lease ending in 100 ms from the reading's sending: edge = %v, %v; want about 100 ms", d, ok)
	}
	// The first try found the lease still live: its reading took 40 ms to
	// answer, and the second try counts from the answer.
	if d, ok := edge(lease(exp), 3*time.Millisecond, 43*time.Millisecond); !ok || d <= 30*time.Millisecond || d > 43*time.Millisecond+edgeMargin {
		t.Errorf("the same lease, 3 ms left from the sending and 43 ms from the answer: edge = %v, %v; want a second try in about 43 ms", d, ok)
	}
	if d, ok := edge(lease(exp), -5*time.Millisecond, 0); ok {
		t.Errorf("the same lease a third time: edge = %v, want the tick", d)
	}
	if d, ok := edge(lease(exp.Add(time.Second)), 2*time.Second, 2*time.Second); ok {
		t.Errorf("a lease ending after the tick: edge = %v, want the tick", d)
	}
	if d, ok := edge(lease(exp.Add(2*time.Second)), -time.Millisecond, 0); !ok || d < 0 || d > edgeMargin {
		t.Errorf("a lease that has just ended: edge = %v, %v; want at once", d, ok)
	}
	own := Lease{Namespace: "edge-once", Leader: el.ID(), Term: 4, ExpiresAt: exp.Add(3 * time.Second)}
	if d, ok := edge(own, 10*time.Millisecond, 10*time.Millisecond); ok {
		t.Errorf("its own lease: edge = %v, want the tick", d)
	}
	// The try fires the driver's signal; an Elector makes it an edge round.
	el.box.lock()
	m.edgeLocked(lease(exp.Add(4*time.Second)), clock.Now())
	el.box.unlock()
	clock.Advance(time.Second)
	select {
	case <-el.kick:
		if c, _ := el.signaled(); c != causeEdge {
			t.Errorf("the edge's signal called for a %s round, want edge", c)
		}
	default:
		t.Error("the edge's timer fired no signal")
	}
}
