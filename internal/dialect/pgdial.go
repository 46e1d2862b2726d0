package dialect

import (
	"context"
	"database/sql/driver"
)

// Connection attempts after a server restart. Every process reconnects at
// once. session.Open's pools let an attempt outlive a caller that gave up,
// but each new caller still started an attempt of its own, and every attempt
// is bounded per host (a tenth of the expiry window for election calls):
// when callers come faster than the server starts backends, the accept
// queue grows until every attempt times out in it, the server starts a
// backend for each only to find the client gone, and no connection succeeds
// until the callers stop. The chaos soak's server restart (24 Electors with
// a 100 ms interval on two cores) left PostgreSQL starting backends for
// nobody for as long as the candidates ran, and its own check could not
// connect for two minutes.
//
// dialSlots keeps that from feeding on itself: at most pgDialLimit attempts
// of one connector are in flight at once, and other callers wait for a slot
// (or for their context), so the queue stays short enough for attempts to
// finish within their bound.
type dialSlots chan struct{}

// pgDialLimit is how many connection attempts one pool makes at once.
const pgDialLimit = 2

func newDialSlots() dialSlots { return make(dialSlots, pgDialLimit) }

// connect runs dial once a slot is free, or returns ctx's error if ctx
// ends first.
func (s dialSlots) connect(ctx context.Context, dial func(context.Context) (driver.Conn, error)) (driver.Conn, error) {
	select {
	case s <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s }()
	return dial(ctx)
}
