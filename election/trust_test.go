package election

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestTrustWindowEdges drives an Elector's rounds by hand on a stub clock:
// it trusts its lease until exactly attempt start + Expire() - SafetyMargin
// and not a nanosecond longer, each renewal moves that end to its own
// attempt's start, and a renewal that returns at or after the end of its
// window does not lead.
func TestTrustWindowEdges(t *testing.T) {
	const expire, margin = 40 * time.Second, 10 * time.Second
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	e := newTestElection(t, db, testdb.Namespace(t), expire)
	el, err := e.NewElector(uuid.New(), ElectorConfig{SafetyMargin: margin})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	el.useClock(clock)
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
