package handoff

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// maxPending bounds the namespaces Watch keeps for a reader that has
// fallen behind; past it, they collapse into one "" (any namespace).
const maxPending = 1024

// Watch subscribes to channel on pool through n and returns, once the
// subscription is confirmed, a channel of the namespaces vacated: coalesced
// while the reader is behind, "" for any namespace (a wake-up without a
// payload, or some lost). It reconnects by itself after a failure; the
// first subscription's failure is returned. The channel is closed when ctx
// ends or notifications stop for good.
func Watch(ctx context.Context, n dialect.Notifier, pool *sql.DB, channel string, log *slog.Logger) (<-chan string, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &vacancies{kick: make(chan struct{}, 1), pending: map[string]struct{}{}}
	out := make(chan string)
	first := make(chan error, 1) // nil once subscribed, or why the first subscription failed
	go func() {
		defer cancel() // for good: the sender below closes out
		err := Loop(ctx, n, pool, channel, log, false,
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
				if _, ns, ok := ParsePayload(payload); ok {
					w.add(ns)
				}
			})
		select {
		case first <- err: // the first subscription failed
		default:
		}
	}()
	if err := <-first; err != nil {
		return nil, err
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
	if ns == "" || len(v.pending) >= maxPending {
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
