package election

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupHandOverTermGuarded: a Group that hands a namespace over
// (Balance) while the work there does not stop at once neither tries the
// seat again, through its rounds or a wake, nor renews that term, until
// the work has returned and it has vacated the term it handed over; its
// pause of two intervals is long past by then. It would otherwise take the
// seat back in the same term (Elect keeps the term of a lease its
// candidate still holds) and then vacate it from under itself. Once the
// term is vacated, the Group, alone, leads again in a new term.
func TestGroupHandOverTermGuarded(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	ctx := electorCtx(t)
	ns := "handover"
	release := make(chan struct{})
	started := make(chan Lease, 4)
	stopped := make(chan struct{}, 1)
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{
		Namespaces: []string{ns},
		Interval:   100 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, l Lease) {
			started <- l
			<-ctx.Done()
			if l.Term == 1 {
				stopped <- struct{}{}
				<-release
			}
		},
	}, WithLogger(silent), WithExpire(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(waitLimit)
	// Hand over once the work runs: a leadership that ends before its
	// OnStartedLeading began never calls it.
	var first Lease
	select {
	case first = <-started:
	case <-time.After(waitLimit):
		t.Fatal("the Group never led")
	}
	if first.Term != 1 {
		t.Fatalf("the Group first led in term %d, want 1", first.Term)
	}

	g.box.lock()
	m := g.members[ns]
	if m.m.cur == nil || m.m.cur.lease.Term != first.Term {
		g.box.unlock()
		t.Fatalf("the Group no longer leads in term %d before the hand-over", first.Term)
	}
	g.handOverLocked(m)
	g.box.unlock()
	select {
	case <-stopped:
	case <-time.After(waitLimit):
		t.Fatal("the work of the handed-over term never saw its context end")
	}
	// Rounds and wakes while the work runs: well past the two intervals'
	// pause, within the lease (2 s) the Group still holds in the database.
	until := time.Now().Add(1200 * time.Millisecond)
	for time.Now().Before(until) {
		g.kickRound()
		g.wake(m, signal{kind: sigWake, src: handoff.Local})
		if l, ok := g.Lease(ns); ok {
			t.Fatalf("the Group leads again (term %d) while the work of the term it handed over runs", l.Term)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e := g.base.inNamespace(ns)
	if l, err := e.Leader(ctx); err != nil || !l.HeldBy(g.ID()) || l.Term != first.Term {
		t.Fatalf("the seat while the work runs: %+v, %v; want term %d still held, not vacated", l, err, first.Term)
	}
	close(release)
	for {
		if l, ok := g.Lease(ns); ok {
			if l.Term <= first.Term {
				t.Fatalf("the Group leads in term %d again after handing it over", l.Term)
			}
			seat, err := e.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !seat.HeldBy(g.ID()) || seat.Term != l.Term {
				t.Fatalf("the Group leads in term %d; the seat is %+v", l.Term, seat)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Group did not lead again once the term was vacated")
		}
		time.Sleep(5 * time.Millisecond)
	}
	hist, err := e.History(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hist {
		if h.Term == first.Term && h.EndReason != EndResigned {
			t.Errorf("the handed-over term ended as %q, want %q", h.EndReason, EndResigned)
		}
	}
}
