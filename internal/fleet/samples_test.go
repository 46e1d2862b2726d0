package fleet

import (
	"slices"
	"testing"
	"time"
)

// Statements between two instants come from the reports around them,
// linearly; before the first report it is the first, after the last the
// last; MostStatements finds the busiest slot.
func TestStatementsInterpolated(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pr := &Proc{samples: []Sample{
		{At: at(0), Statements: 10, CPU: 1},
		{At: at(1000), Statements: 20, CPU: 2},
		{At: at(2000), Statements: 60, CPU: 2.5},
	}}
	for _, c := range []struct {
		from, to int
		want     int64
	}{
		{0, 1000, 10}, {0, 2000, 50}, {500, 1500, 25}, {-1000, 500, 5}, {1500, 5000, 20}, {3000, 4000, 0},
	} {
		if got := pr.Statements(at(c.from), at(c.to)); got != c.want {
			t.Errorf("Statements(%d ms, %d ms) = %d, want %d", c.from, c.to, got, c.want)
		}
	}
	if got := pr.CPU(at(0), at(2000)); got != 1.5 {
		t.Errorf("CPU = %g, want 1.5", got)
	}
	n, start := pr.MostStatements(at(0), at(2000), time.Second)
	if n != 40 || !start.Equal(at(1000)) {
		t.Errorf("MostStatements = %d at %v, want 40 at +1s", n, start.Sub(t0))
	}
	if n, _ := (&Proc{}).MostStatements(at(0), at(2000), time.Second); n != 0 {
		t.Errorf("without reports: %d", n)
	}
}

// LedOver counts, at each step, the leaderships a process had begun and
// not ended by then, and gives its ready time from the fleet's start
// (zero for one not ready).
func TestLedOver(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	f := &Fleet{started: t0, procs: []*Proc{
		{readyAt: at(300), starts: []start{{at: at(400), ns: "a"}, {at: at(600), ns: "b"}, {at: at(900), ns: "c"}},
			stops: []Stop{{At: at(700), Namespace: "a"}}},
		{},
	}}
	ready, led := f.LedOver(250*time.Millisecond, time.Second)
	if len(ready) != 2 || ready[0] != 300*time.Millisecond || ready[1] != 0 {
		t.Errorf("ready = %v, want [300ms 0s]", ready)
	}
	want := [][]int{{0, 1, 1, 2}, {0, 0, 0, 0}}
	for i := range want {
		if len(led) != len(want) || !slices.Equal(led[i], want[i]) {
			t.Fatalf("led = %v, want %v", led, want)
		}
	}
}
