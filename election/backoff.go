package election

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is a capped exponential backoff with jitter, for the loops that
// retry: transient conflicts in the library's own transactions (retry.go),
// the handoff listener's reconnections (handoff.go) and an Elector's failed
// rounds (elector.go).
//
// The nominal wait before retry n (counted from 1) is first doubled n-1
// times, at most max. The wait itself is drawn evenly from nominal ± jitter
// × nominal, so that callers that failed together do not retry together.
type backoff struct {
	first, max time.Duration
	jitter     float64 // in [0, 1]
}

// nominal is the wait before retry n without jitter.
func (b backoff) nominal(n int) time.Duration {
	d := b.first
	for i := 1; i < n && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

// wait is the jittered wait before retry n.
func (b backoff) wait(n int) time.Duration {
	d := b.nominal(n)
	spread := time.Duration(2 * b.jitter * float64(d))
	return d - spread/2 + rand.N(spread+1)
}

// pause waits for d, or until ctx ends; it reports whether the wait ran
// out (false: ctx ended first).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
