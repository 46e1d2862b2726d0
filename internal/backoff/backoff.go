// Package backoff is a capped exponential backoff with jitter, for the
// loops that retry: transient conflicts in the library's own transactions,
// the handoff listener's reconnections and an Elector's failed rounds.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with jitter.
//
// The nominal wait before retry n (counted from 1) is First doubled n-1
// times, at most Max. The wait itself is drawn evenly from nominal ±
// Jitter × nominal, so that callers that failed together do not retry
// together.
type Backoff struct {
	First, Max time.Duration
	Jitter     float64 // in [0, 1]
}

// Nominal is the wait before retry n without jitter.
func (b Backoff) Nominal(n int) time.Duration {
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Wait is the jittered wait before retry n.
func (b Backoff) Wait(n int) time.Duration {
	d := b.Nominal(n)
	spread := time.Duration(2 * b.Jitter * float64(d))
	return d - spread/2 + rand.N(spread+1)
}

// Pause waits for d, or until ctx ends; it reports whether the wait ran
// out (false: ctx ended first).
func Pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
