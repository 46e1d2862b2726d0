package election

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// maxPendingVacancies bounds the namespaces WatchVacancies keeps for a
// reader that has fallen behind; past it, they collapse into one "" (any
// namespace).
const maxPendingVacancies = 1024

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
	if limit := pool.Stats().MaxOpenConnections; n.HoldsListenConn() && limit > 0 && limit < minListenPool {
		return nil, fmt.Errorf("election: WatchVacancies: the pool allows %d connections, fewer than the %d listening needs: %w",
			limit, minListenPool, errors.ErrUnsupported)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &vacancies{kick: make(chan struct{}, 1), pending: map[string]struct{}{}}
	out := make(chan string)
	first := make(chan error, 1) // nil once subscribed, or why the first subscription failed
	go func() {
		defer cancel() // for good: the sender below closes out
		err := listenLoop(ctx, n, pool, channelFor(e.schema), e.logBase.With("listener", "WatchVacancies"), false,
			func(again bool) {
				if again {
					w.add("") // sent while reconnecting: lost
				} else {
					first <- nil
				}
			},
			func(payload string) {
				if payload == "" {
					w.add("")
					return
				}
				if _, ns, ok := parseHandoffPayload(payload); ok {
					w.add(ns)
				}
			})
		select {
		case first <- err: // the first subscription failed
		default:
		}
	}()
	if err := <-first; err != nil {
		return nil, fmt.Errorf("election: WatchVacancies: %w", err)
	}
	go func() {
		defer close(out)
		for {
			ns, ok := w.next()
			if !ok {
				select {
				case <-w.kick:
					continue
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- ns:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// vacancies are the namespaces told of and not yet read, coalesced.
type vacancies struct {
	kick chan struct{} // capacity 1: something was added

	mu      sync.Mutex
	all     bool // "" pending: any namespace
	pending map[string]struct{}
}

func (v *vacancies) add(ns string) {
	v.mu.Lock()
	if ns == "" || len(v.pending) >= maxPendingVacancies {
		v.all = true
		clear(v.pending)
	} else if !v.all {
		v.pending[ns] = struct{}{}
	}
	v.mu.Unlock()
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

// next takes one pending namespace ("" for any), if there is one.
func (v *vacancies) next() (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.all {
		v.all = false
		return "", true
	}
	for ns := range v.pending {
		delete(v.pending, ns)
		return ns, true
	}
	return "", false
}
