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
