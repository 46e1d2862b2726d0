package election

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// Now reads the database clock, the clock every expiry is judged by (see
// the package doc's "Clock"), in UTC. Tools that show how long a lease has
// left subtract it from Lease.ExpiresAt, never the host's own clock. It
// needs no tables.
func (e *Election) Now(ctx context.Context, opts ...CallOption) (time.Time, error) {
	var now dialect.Time
	err := e.autocommit(ctx, "Now", opts, func(conn gorm.ConnPool, _ bool) error {
		return conn.QueryRowContext(ctx, e.q.Clock).Scan(&now)
	})
	if err != nil {
		return time.Time{}, err
	}
	return now.Time, nil
}

// clock is the local monotonic clock of the engine: the trust windows, the
// watchdogs, sit-outs and the drivers' timers run on it. Tests stub it to
// move time by hand; the database clock, which decides expiry, is never
// read through it.
type clock interface {
	Now() time.Time
	// AfterFunc runs f on a goroutine of its own once d has passed.
	AfterFunc(d time.Duration, f func()) timer
	// NewTimer returns a timer whose channel receives once d has passed.
	NewTimer(d time.Duration) chanTimer
}

// timer is a stoppable, resettable timer, as time.Timer is.
type timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// chanTimer is a timer with a channel, for select loops.
type chanTimer interface {
	timer
	C() <-chan time.Time
}

// systemClock is the real monotonic clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

func (systemClock) NewTimer(d time.Duration) chanTimer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.Timer.C }
