package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/pace"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// stallable is a Group whose calls fail while stalled is set, as if the
// database were out of its reach.
type stallable struct {
	g       *Group
	stalled atomic.Bool
}

func newStallable(t *testing.T, ctx context.Context, db *gorm.DB, nss []string, expire time.Duration) *stallable {
	t.Helper()
	s := &stallable{}
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss, Balance: true}, WithExpire(expire), WithLogger(silent))
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	stallWhile(g, &s.stalled)
	s.g = g
	runUntilCleanup(t, ctx, g)
	return s
}

// TestGroupShareHeldAfterItsRoundsFailed: two balanced Groups lead four of
// eight namespaces each when both lose the database for longer than an
// expiry window (every lease and both member rows lapse). The first back
// counts one live member, the other's row having lapsed, but does not
// believe it for an expiry window after its own rounds failed: it takes
// no more than its share of four plus one (balanceLocked), where it would
// take all eight and hand half of them back a statement each once the
// other is back. Once that window has passed with the other still away,
// it is believed gone: the first leads every namespace.
func TestGroupShareHeldAfterItsRoundsFailed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		const (
			// Two seconds, the default interval of 667 ms: a round is
			// slow (attempts shed) past 167 ms, which the full -race
			// suite on a loaded two-core machine reaches often enough
			// with a window of one second to keep the Group at its share
			// for 20 s (twice in CI, on Galera and on PostgreSQL).
			expire = 2 * time.Second
			m      = 8
		)
		var nss []string
		for range m {
			nss = append(nss, testdb.Namespace(t))
		}
		a := newStallable(t, ctx, db, nss, expire)
		b := newStallable(t, ctx, db, nss, expire)
		waitFor := func(within time.Duration, what string, ok func() bool) {
			t.Helper()
			waitUntil(t, within, what, ok, func() string {
				return fmt.Sprintf("a leads %d, b %d", len(a.g.Leading()), len(b.g.Leading()))
			})
		}
		waitFor(20*time.Second, "settled at four each", func() bool {
			return len(a.g.Leading()) == m/2 && len(b.g.Leading()) == m/2
		})

		a.stalled.Store(true)
		b.stalled.Store(true)
		waitFor(2*expire, "both stepped down", func() bool { return len(a.g.Leading())+len(b.g.Leading()) == 0 })
		// The member rows were last refreshed at most an interval before
		// the stall: lapsed an expiry window after it.
		time.Sleep(expire)

		a.stalled.Store(false)
		back := time.Now()
		a.g.kickRound()
		// a's last failed round began at most an interval (plus its
		// jitter) before, so its hold lasts at least 3/5 of a window more.
		most := 0
		for time.Since(back) < expire/2 {
			most = max(most, len(a.g.Leading()))
			time.Sleep(time.Millisecond)
		}
		if most == 0 {
			t.Fatalf("a led no namespace in the %v after its rounds came back", expire/2)
		}
		if most > m/2+1 {
			t.Errorf("a led %d namespaces while its own rounds had just failed and b's row had lapsed, want at most its share %d plus one", most, m/2)
		}

		// b stays away: after the window, a believes it gone (later on a
		// busy machine, whose slow rounds hold the count and shed the
		// attempts).
		waitFor(20*time.Second, "a leads every namespace while b is away", func() bool { return len(a.g.Leading()) == m })

		b.stalled.Store(false)
		waitFor(20*time.Second, "settled at four each again", func() bool {
			return len(a.g.Leading()) == m/2 && len(b.g.Leading()) == m/2
		})
	})
}

// TestGroupFindsASeatThatLapsedWhileItsRoundsFailed: a seat whose last
// reading showed another Group's live lease, and whose lease lapsed while
// this Group's rounds failed, longer than an expiry window before they
// came back, is read again by key and taken: a round's range finds only
// the seats that lapsed within the window, and such a seat was read last
// as led. (Before, the Group never read it again: a balanced Group held
// its own share only, once in CI on TiDB.)
func TestGroupFindsASeatThatLapsedWhileItsRoundsFailed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		const expire = 2 * time.Second
		ns := testdb.Namespace(t)
		b := newStallable(t, ctx, db, []string{ns}, expire)
		waitUntil(t, 10*time.Second, "b leads", func() bool { return b.g.IsLeader(ns) })
		a := newStallable(t, ctx, db, []string{ns}, expire)
		waitUntil(t, 10*time.Second, "a read b's lease", func() bool { return a.g.Observed(ns).Leader == b.g.ID() })

		a.stalled.Store(true)
		b.stalled.Store(true)
		waitUntil(t, 2*expire, "b stepped down", func() bool { return !b.g.IsLeader(ns) })
		// b's lease ends at most the margin after its step-down: lapsed
		// for longer than a window once a is back.
		time.Sleep(expire + expire/2)

		a.stalled.Store(false)
		a.g.kickRound()
		waitUntil(t, 3*expire, "a leads the seat b's lease left", func() bool { return a.g.IsLeader(ns) })
	})
}

// waitUntil polls ok until it holds, failing t after within with what was
// awaited and, when given, the state then.
func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool, state ...func() string) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			var detail string
			for _, f := range state {
				detail += " (" + f() + ")"
			}
			t.Fatalf("after %v: not %s%s", within, what, detail)
		}
	}
}

// handDriven returns a balanced Group of n new namespaces on SQLite, and
// the namespaces, marked running without Run and past its warm-up: for
// tests that drive balanceLocked and nextQueued by hand.
func handDriven(t *testing.T, n int) (*Group, []string) {
	t.Helper()
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	var nss []string
	for range n {
		nss = append(nss, testdb.Namespace(t))
	}
	g, err := NewGroup(electorCtx(t), db, uuid.New(), GroupConfig{Namespaces: nss, Balance: true}, WithLogger(silent))
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	g.box.lock()
	g.running = true
	g.warm = g.clk.Now().Add(-time.Second)
	g.box.unlock()
	return g, nss
}

// TestGroupSparesTriedWhenTheBatchIsLost: a balanced Group below its share
// queues the free seats beyond its room as spares behind the batch that
// fills it. Should others take the batch's seats first (processes below
// their share try the same few free seats at a cold start's end and after
// a crash), the spares are tried at once, not a round later; once the
// share is reached, they are dropped, never taken above it. Driven by
// hand, without Run: balanceLocked, then nextQueued.
func TestGroupSparesTriedWhenTheBatchIsLost(t *testing.T) {
	g, nss := handDriven(t, 6)
	other := uuid.New()
	g.box.lock()
	now := g.clk.Now()
	// Six free seats, three live members: a share of two.
	g.setQueueLocked(g.balanceLocked(now, len(nss), 3, slices.Clone(g.sortedLocked()), false))
	share := g.share
	g.box.unlock()
	if share != 2 {
		t.Fatalf("share %d, want 2", share)
	}
	tried := map[string]bool{}
	for batch := range 3 {
		mems := g.nextQueued(pace.Max)
		if len(mems) != share {
			t.Fatalf("batch %d: %d seats tried, want %d (the spares after the seats lost before)", batch, len(mems), share)
		}
		g.box.lock()
		for _, mem := range mems {
			if tried[mem.ns] {
				t.Fatalf("batch %d: %s tried again", batch, mem.ns)
			}
			tried[mem.ns] = true
			// Taken by another since the round read it.
			g.attemptedLocked(mem, result{start: now, observe: true,
				lease: Lease{Namespace: mem.ns, Leader: other, Term: 1, ExpiresAt: now.Add(time.Minute)}})
		}
		g.box.unlock()
	}
	if mems := g.nextQueued(pace.Max); len(mems) != 0 {
		t.Fatalf("%d more seats tried after all six", len(mems))
	}

	// At the share, the spares are dropped.
	g.box.lock()
	g.setQueueLocked(g.balanceLocked(now, len(nss), 3, slices.Clone(g.sortedLocked()), false))
	before := len(g.queue)
	g.box.leading = share
	g.box.unlock()
	if before != len(nss) {
		t.Fatalf("%d seats queued, want all %d (two, then four spares)", before, len(nss))
	}
	mems := g.nextQueued(pace.Max)
	g.box.lock()
	queued := len(g.queue)
	g.box.leading, g.running = 0, false
	g.box.unlock()
	if len(mems) != 0 || queued != 0 {
		t.Fatalf("at the share: %d seats tried, %d left queued; want none", len(mems), queued)
	}
}

// TestGroupAboveTheShareOnlyOnceTheOthersStop: a balanced Group at its
// share leaves a free seat to the others for two rounds, then takes one
// above the share, but only once the free seats its rounds find stop
// falling. While they fall, the Groups below their share are still taking
// them (a cold start's end), and a seat taken above the share would be
// handed back the next round, a vacate that wakes every Group below its
// share for the same seat. Before, at a cold start of 10,000 namespaces x
// 16 processes, every process at its share took one above it while
// thousands were free. Driven by hand, without Run.
func TestGroupAboveTheShareOnlyOnceTheOthersStop(t *testing.T) {
	g, nss := handDriven(t, 8)
	g.box.lock()
	defer g.box.unlock()
	now := g.clk.Now()
	// Eight namespaces, four live members: a share of two, which the
	// Group holds (as far as balancing counts).
	g.box.leading = 2
	defer func() { g.box.leading, g.running = 0, false }()
	free := func(n int) []*member { return slices.Clone(g.sortedLocked())[:n] }
	rounds := []struct {
		found   int
		sampled bool
		want    int
	}{
		{6, false, 0}, // seen free once
		{6, false, 0}, // twice
		{4, false, 0}, // the others took two since: falling
		{4, true, 0},  // a sample of those believed free: no count
		{4, false, 1}, // no fewer than the last count: one above the share
	}
	for i, r := range rounds {
		got := g.balanceLocked(now, len(nss), 4, free(r.found), r.sampled)
		if g.share != 2 {
			t.Fatalf("round %d: share %d, want 2", i, g.share)
		}
		if len(got) != r.want {
			t.Fatalf("round %d (%d found free, sampled %v): %d seats to try at the share, want %d", i, r.found, r.sampled, len(got), r.want)
		}
	}
}

// stopCounter counts the ends of leadership by reason.
type stopCounter struct {
	NopObserver
	mu    sync.Mutex
	stops map[StopReason]int
}

func (o *stopCounter) LeadershipStopped(l Leadership) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stops == nil {
		o.stops = map[StopReason]int{}
	}
	o.stops[l.Reason]++
}

func (o *stopCounter) count(r StopReason) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stops[r]
}

// TestGroupLeadsWhatItsRoundsCanRenew: a Group whose rounds answer, but in
// more than three eighths of the trust window (the database overloaded), stops
// leading the seats it took last, reported as StopOverloaded, and keeps at
// least one without ever stepping down: the rounds still renew in time.
// Once they are quick again it takes every seat back, the seats it let
// lapse among them. Before, it kept renewing every seat with rounds that
// slow, until one ran past the trust window in a real overload and it
// stepped down from all of them at once, then took them all back.
func TestGroupLeadsWhatItsRoundsCanRenew(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		// A trust window of 4.7 s, renewals every 1.67 s. A round held
		// up 1.8 s is heavy (above 1.7625 s), and the next renewal still
		// answers within the window, 1.1 s to spare for the database's
		// own time in two rounds: 1.8 + 1.8 s. (With a window of 2.7 s
		// and rounds held up 1.15 s, 0.4 s was spare, too little in CI
		// beside the suites that run a browser.)
		const (
			expire = 5 * time.Second
			margin = 300 * time.Millisecond
			slow   = 1800 * time.Millisecond
		)
		var nss []string
		for range 8 {
			nss = append(nss, testdb.Namespace(t))
		}
		obs := &stopCounter{}
		var delay atomic.Int64
		g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss, SafetyMargin: margin}, WithExpire(expire), WithLogger(silent), WithObserver(obs))
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		g.hooks.call = func(ctx context.Context) error {
			if d := time.Duration(delay.Load()); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
		runUntilCleanup(t, ctx, g)
		led := func() int { return len(g.Leading()) }
		state := func() string {
			return fmt.Sprintf("leading %d, stopped overloaded %d, stepped down %d",
				led(), obs.count(StopOverloaded), obs.count(StopSteppedDown))
		}
		waitUntil(t, 15*time.Second, "every namespace led", func() bool { return led() == len(nss) }, state)

		delay.Store(int64(slow))
		waitUntil(t, 4*expire, "leading fewer", func() bool { return led() < len(nss) && obs.count(StopOverloaded) > 0 }, state)
		for deadline := time.Now().Add(expire); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if led() == 0 {
				t.Fatalf("the slow rounds left no seat led (%s)", state())
			}
		}

		delay.Store(0)
		waitUntil(t, 40*time.Second, "every namespace led again", func() bool { return led() == len(nss) }, state)
		if n := obs.count(StopSteppedDown); n > 0 {
			t.Errorf("%d step-downs: the rounds renewed in time, only more slowly (%s)", n, state())
		}
	})
}

// stallWhile fails every database call of g's rounds and attempts while
// stalled is set.
func stallWhile(g *Group, stalled *atomic.Bool) {
	g.hooks.call = func(context.Context) error {
		if stalled.Load() {
			return errors.New("stalled by the test")
		}
		return nil
	}
}

// holdWhile makes g's database calls wait while held is set, until the
// release it returns is called (once or more) or their context ends.
func holdWhile(g *Group, held *atomic.Bool) (release func()) {
	ch := make(chan struct{})
	g.hooks.call = func(ctx context.Context) error {
		if !held.Load() {
			return nil
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// TestGroupLeadsOnASlowDatabaseWithAShortInterval: a Group at Interval
// 200 ms under the default 60 s window, whose every round and attempt
// takes 100 ms more (a database that answers that slowly), still takes
// its seats: a round is slow when it takes a quarter of the interval or a
// tenth of the trust window, whichever is longer (timing.slowRound). By a
// quarter of the interval alone every round was slow, every attempt was
// shed, and the Group led nothing (on TiDB, 0-2 of 1,324 namespaces after
// a minute).
func TestGroupLeadsOnASlowDatabaseWithAShortInterval(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	var nss []string
	for range 8 {
		nss = append(nss, testdb.Namespace(t))
	}
	g, err := NewGroup(electorCtx(t), db, uuid.New(), GroupConfig{Namespaces: nss, Interval: 200 * time.Millisecond}, WithLogger(silent))
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	g.hooks.call = func(ctx context.Context) error {
		select {
		case <-time.After(100 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(electorCtx(t))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for len(g.Leading()) < len(nss) {
		if time.Now().After(deadline) {
			t.Fatalf("the Group leads %d of %d namespaces after 15 s of rounds that take 100 ms at Interval 200 ms", len(g.Leading()), len(nss))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
