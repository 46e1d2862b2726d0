package election

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupTrustsFromSending, on a stub clock: a Group's renewal is
// trusted from the moment its statement is sent, not from the start of
// the round's walk over its members, which comes first under the Group's
// lock (up to 790 ms of a 1.5 s trust window at 40,000 namespaces x 16
// processes on two cores). The walk of the renewing round here takes
// 12 s of a 24 s window; the leader then stays trusted until the renewal's
// sending plus the window, no longer, and steps down there.
func TestGroupTrustsFromSending(t *testing.T) {
	const expire = 30 * time.Second
	trust := expire - expire/5
	const walk = 12 * time.Second
	ctx := electorCtx(t)
	db := migratedSQLite(t, ctx, "trust")
	ns := testdb.Namespace(t)
	var (
		mu      sync.Mutex
		started []Lease
		stops   []Lease
	)
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{
		Namespaces:       []string{ns},
		OnStartedLeading: func(_ context.Context, l Lease) { mu.Lock(); started = append(started, l); mu.Unlock() },
		OnStoppedLeading: func(l Lease) { mu.Lock(); stops = append(stops, l); mu.Unlock() },
	}, WithExpire(expire), WithLogger(silent))
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	g.useClock(clock)
	var armed atomic.Bool
	g.hooks.walked = func() {
		if armed.CompareAndSwap(true, false) {
			clock.set(clock.Now().Add(walk)) // the walk took that long
		}
	}
	var paused atomic.Bool
	resume := holdWhile(g, &paused)
	rounds := make(chan roundReport, 64)
	g.hooks.round = func(r roundReport) {
		select {
		case rounds <- r:
		default:
		}
	}
	defer resume()
	runUntilCleanup(t, ctx, g)

	// The seat is taken at t0 without the clock moving: trusted until
	// t0 + trust.
	t0 := clock.Now()
	waitUntil(t, 10*time.Second, "leading", func() bool { return g.IsLeader(ns) })
	for len(rounds) > 0 {
		<-rounds
	}

	// A renewal at t0 + 10 s whose walk takes 12 s: sent at t0 + 22 s.
	clock.set(t0.Add(10 * time.Second))
	armed.Store(true)
	g.kickRound()
	for {
		r := <-rounds
		if r.err != nil {
			t.Fatalf("the renewing round: %v", r.err)
		}
		if !armed.Load() {
			break
		}
	}
	sent := t0.Add(10*time.Second + walk)

	// No renewal answers from here on.
	paused.Store(true)
	clock.Advance(t0.Add(10 * time.Second).Add(trust).Sub(clock.Now()))
	if !g.IsLeader(ns) {
		t.Fatalf("stepped down %v after the round began, %v after its renewal was sent: the trust window counted from the walk's start", trust, trust-walk)
	}
	clock.Advance(sent.Add(trust - time.Nanosecond).Sub(clock.Now()))
	if !g.IsLeader(ns) {
		t.Fatal("not leading a nanosecond before the end of the trust window counted from the renewal's sending")
	}
	clock.Advance(time.Nanosecond)
	if g.IsLeader(ns) {
		t.Fatal("still leading at the end of the trust window counted from the renewal's sending")
	}
	waitUntil(t, 10*time.Second, "OnStoppedLeading", func() bool { mu.Lock(); defer mu.Unlock(); return len(stops) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(started) != 1 || stops[0].Term != started[0].Term {
		t.Errorf("leaderships started %v, stopped %v: want one, stopped once", started, stops)
	}
}
