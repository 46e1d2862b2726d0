package election

import (
	"context"
	"testing"
	"time"
)

// TestBackoff: waits start at first, double up to max, and stay within
// their jitter of the nominal wait.
func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		b    backoff
		want []time.Duration // nominal waits in ms before retries 1, 2, ...
	}{
		{conflictBackoff, []time.Duration{2, 4, 8, 16, 32, 64, 128, 250, 250, 250}},
		{backoff{first: 3 * time.Millisecond, max: 10 * time.Millisecond, jitter: 0.2}, []time.Duration{3, 6, 10, 10}},
		{backoff{first: 10 * time.Millisecond, max: 5 * time.Millisecond}, []time.Duration{5, 5}},
	} {
		for i, w := range c.want {
			n, want := i+1, w*time.Millisecond
			if got := c.b.nominal(n); got != want {
				t.Errorf("%+v: nominal(%d) = %v, want %v", c.b, n, got, want)
			}
			lo := want - time.Duration(c.b.jitter*float64(want))
			hi := want + time.Duration(c.b.jitter*float64(want))
			for range 200 {
				if got := c.b.wait(n); got < lo || got > hi {
					t.Fatalf("%+v: wait(%d) = %v, want within [%v, %v]", c.b, n, got, lo, hi)
				}
			}
		}
	}
	// Many retries do not overflow.
	if got := listenBackoff.nominal(1000); got != listenBackoff.max {
		t.Errorf("nominal(1000) = %v, want the cap %v", got, listenBackoff.max)
	}
	// The jitter spreads waits over the whole range, not one end of it.
	b := backoff{first: time.Second, max: time.Second, jitter: 0.5}
	var below, above bool
	for range 1000 {
		w := b.wait(1)
		below = below || w < 900*time.Millisecond
		above = above || w > 1100*time.Millisecond
	}
	if !below || !above {
		t.Errorf("waits are not spread around the nominal one: below %v, above %v", below, above)
	}
}

// TestPause: pause waits its duration, and returns at once when the
// context ends.
func TestPause(t *testing.T) {
	if !pause(context.Background(), time.Millisecond) {
		t.Fatal("pause did not run out")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if pause(ctx, time.Hour) {
		t.Fatal("pause ran out although the context had ended")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("pause took %v after the context ended", d)
	}
}
