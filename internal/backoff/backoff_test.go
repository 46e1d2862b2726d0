package backoff

import (
	"context"
	"testing"
	"time"
)

// TestBackoff: waits start at first, double up to max, and stay within
// their jitter of the nominal wait.
func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		b    Backoff
		want []time.Duration // nominal waits in ms before retries 1, 2, ...
	}{
		{Backoff{First: 2 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.5}, []time.Duration{2, 4, 8, 16, 32, 64, 128, 250, 250, 250}},
		{Backoff{First: 3 * time.Millisecond, Max: 10 * time.Millisecond, Jitter: 0.2}, []time.Duration{3, 6, 10, 10}},
		{Backoff{First: 10 * time.Millisecond, Max: 5 * time.Millisecond}, []time.Duration{5, 5}},
	} {
		for i, w := range c.want {
			n, want := i+1, w*time.Millisecond
			if got := c.b.Nominal(n); got != want {
				t.Errorf("%+v: nominal(%d) = %v, want %v", c.b, n, got, want)
			}
			lo := want - time.Duration(c.b.Jitter*float64(want))
			hi := want + time.Duration(c.b.Jitter*float64(want))
			for range 200 {
				if got := c.b.Wait(n); got < lo || got > hi {
					t.Fatalf("%+v: wait(%d) = %v, want within [%v, %v]", c.b, n, got, lo, hi)
				}
			}
		}
	}
	// Many retries do not overflow.
	long := Backoff{First: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}
	if got := long.Nominal(1000); got != long.Max {
		t.Errorf("Nominal(1000) = %v, want the cap %v", got, long.Max)
	}
	// The jitter spreads waits over the whole range, not one end of it.
	b := Backoff{First: time.Second, Max: time.Second, Jitter: 0.5}
	var below, above bool
	for range 1000 {
		w := b.Wait(1)
		below = below || w < 900*time.Millisecond
		above = above || w > 1100*time.Millisecond
	}
	if !below || !above {
		t.Errorf("waits are not spread around the nominal one: below %v, above %v", below, above)
	}
}

// TestPause: Pause waits its duration, and returns at once when the
// context ends.
func TestPause(t *testing.T) {
	if !Pause(context.Background(), time.Millisecond) {
		t.Fatal("Pause did not run out")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Pause(ctx, time.Hour) {
		t.Fatal("Pause ran out although the context had ended")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Pause took %v after the context ended", d)
	}
}
