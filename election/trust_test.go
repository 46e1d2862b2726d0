package election

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// The expiry window and safety margin of the Electors these tests drive
// by hand on a stub clock: trusted for 30 s after each attempt's start.
const trustExpire, trustMargin = 40 * time.Second, 10 * time.Second

// newClockedElector returns an Elector on db with trustExpire and
// trustMargin, whose rounds run on a stub clock it also returns.
func newClockedElector(t *testing.T, db *gorm.DB, opts ...Option) (*Elector, *fakeClock) {
	t.Helper()
	e := newTestElection(t, db, testdb.Namespace(t), trustExpire, opts...)
	el, err := e.NewElector(uuid.New(), ElectorConfig{SafetyMargin: trustMargin})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	el.useClock(clock)
	return el, clock
}

// TestTrustWindowEdges drives an Elector's rounds by hand on a stub clock:
// it trusts its lease until exactly attempt start + Expire() - SafetyMargin
// and not a nanosecond longer, each renewal moves that end to its own
// attempt's start, and a renewal that returns at or after the end of its
// window does not lead.
func TestTrustWindowEdges(t *testing.T) {
	const expire, margin = trustExpire, trustMargin
	el, clock := newClockedElector(t, testdb.Open(t, testdb.Target{Name: "sqlite"}))
	ctx := context.Background()
	round := func() error { return el.round(ctx, causeTick) }
	leadsAt := func(at time.Time) bool {
		clock.set(at)
		return el.IsLeader()
	}

	// The first grant: trusted until start + expire - margin.
	start := clock.Now()
	if err := round(); err != nil {
		t.Fatalf("first round: %v", err)
	}
	end := start.Add(expire - margin)
	if !leadsAt(start) || !leadsAt(end.Add(-time.Nanosecond)) {
		t.Fatalf("not leading inside the trust window [%v, %v)", start, end)
	}
	if leadsAt(end) {
		t.Fatalf("still leading at the end of the trust window %v", end)
	}

	// A renewal started later moves the end to its own start + expire - margin.
	start = end.Add(-time.Second)
	clock.set(start)
	if err := round(); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	end = start.Add(expire - margin)
	if !leadsAt(end.Add(-time.Nanosecond)) || leadsAt(end) {
		t.Fatalf("after the renewal started at %v: want trust until exactly %v", start, end)
	}

	// A renewal whose answer comes a nanosecond before the end of its
	// window leads; one that comes exactly at the end does not.
	for _, late := range []time.Duration{-time.Nanosecond, 0} {
		start = end.Add(time.Second)
		clock.set(start)
		el.hooks.call = func(context.Context) error {
			clock.set(start.Add(expire - margin + late))
			return nil
		}
		err := round()
		el.hooks.call = nil
		clock.set(start)
		switch {
		case late < 0 && (err != nil || !el.IsLeader()):
			t.Fatalf("renewal answered %v before the end of its window: err %v, leading %v; want leading", -late, err, el.IsLeader())
		case late == 0 && (err == nil || !strings.Contains(err.Error(), "trust window") || el.IsLeader()):
			t.Fatalf("renewal answered at the end of its window: err %v, leading %v; want an error and not leading", err, el.IsLeader())
		}
		if late < 0 {
			end = start.Add(expire - margin)
		}
	}
}

// TestRenewalAnsweredAfterTrustEnded: a renewal whose leadership ended
// while it ran (here the trust window ran out, as it does when a round is
// slow) is reported as OutcomeSuperseded, with the lease it wrote, not as
// a renewal; the candidate does not lead by it. On every database.
func TestRenewalAnsweredAfterTrustEnded(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			obs := &recObserver{}
			el, clock := newClockedElector(t, testdb.Open(t, tg), WithObserver(obs))
			ctx := context.Background()
			if err := el.round(ctx, causeTick); err != nil || !el.IsLeader() {
				t.Fatalf("first round: err %v, leading %v; want leading", err, el.IsLeader())
			}
			led, _ := obs.events.wait(t, "the grant", 0, attemptOf(el.ID(), OutcomeLed))

			// The trust window ends while the renewal is on its way.
			el.hooks.call = func(context.Context) error {
				clock.Advance(trustExpire)
				return nil
			}
			from := obs.events.len()
			err := el.round(ctx, causeTick)
			el.hooks.call = nil
			if err != nil || el.IsLeader() {
				t.Fatalf("renewal answered after the trust window: err %v, leading %v; want no error and not leading", err, el.IsLeader())
			}
			a, _ := obs.events.wait(t, "the late renewal's report", from, func(ev obsEvent) bool { return ev.kind == "attempt" })
			if a.a.Outcome != OutcomeSuperseded || !a.a.Lease.HeldBy(el.ID()) || a.a.Lease.Term != led.a.Lease.Term {
				t.Fatalf("late renewal reported as %q with lease %+v; want %q with the lease of term %d it wrote",
					a.a.Outcome, a.a.Lease, OutcomeSuperseded, led.a.Lease.Term)
			}
			for _, ev := range obs.events.snapshot()[from:] {
				if ev.kind == "attempt" && ev.a.Outcome == OutcomeRenewed {
					t.Fatalf("a renewal reported after the leadership ended: %+v", ev.a)
				}
			}
		})
	}
}
