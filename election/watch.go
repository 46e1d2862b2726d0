package election

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
)

// WatchVacancies returns a channel that receives the namespace of each seat
// vacated in the Election's tables, in any namespace (not only e's): by a
// leader's UnregisterCandidate or Resign, or by VacateSeat or VacateLease.
// It is for tools that follow the elections, such as `sqlelect watch`, and
// rides on what wakes candidates in other processes (see "Fast handoff" in
// the package doc): LISTEN/NOTIFY on PostgreSQL, the file beside the
// database on SQLite on Linux, and whatever else the database's dialect
// offers. Where listening holds a connection (PostgreSQL), it holds one of
// the pool's connections while it runs.
//
// Only vacancies are pushed. Grants, renewals, leases that lapse, and
// candidates joining or leaving send nothing: read the tables on a timer as
// well. A vacancy is usually followed at once by a new grant, so a reader
// should read the namespace when told and again shortly after. Wake-ups are
// hints: they coalesce (a reader that falls behind gets each namespace
// once), may arrive before the vacating transaction has committed (SQLite),
// and an empty string means any namespace: the database does not say which
// (a wake-up without a payload), or some were lost (the listener
// reconnected, or too many were pending). Read every namespace then.
//
// WatchVacancies returns once the subscription is confirmed. It returns an
// error matching errors.ErrUnsupported when the database cannot push them
// (its dialect has no way to, or it does not work here: a driver or a
// pooler that cannot listen, an in-memory SQLite database, a pool limited
// to fewer than three connections where listening holds one), and the
// failure when the first subscription fails; the caller then relies on
// reading the tables alone. Once subscribed, it reconnects by itself after
// a failure. The channel is closed when ctx ends, or when notifications
// stop for good. A nil ctx is refused with ErrInvalidOption.
func (e *Election) WatchVacancies(ctx context.Context) (<-chan string, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	n, ok := e.d.(dialect.Notifier)
	pool := e.pool()
	if !ok || pool == nil {
		return nil, fmt.Errorf("election: WatchVacancies: %s does not push notifications: %w", e.d.Name(), errors.ErrUnsupported)
	}
	if limit := pool.Stats().MaxOpenConnections; n.HoldsListenConn() && limit > 0 && limit < handoff.MinListenPool {
		return nil, fmt.Errorf("election: WatchVacancies: the pool allows %d connections, fewer than the %d listening needs: %w",
			limit, handoff.MinListenPool, errors.ErrUnsupported)
	}
	out, err := handoff.Watch(ctx, n, pool, handoff.Channel(e.schema), e.logBase.With("listener", "WatchVacancies"))
	if err != nil {
		return nil, fmt.Errorf("election: WatchVacancies: %w", err)
	}
	return out, nil
}
