package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"gorm.io/gorm"
)

// Notifier is implemented by dialects whose database can wake sessions in
// other processes: a notification sent inside a transaction is delivered to
// every listener of its channel when, and only if, the transaction commits.
// It is optional; callers test for it with a type assertion and fall back to
// polling without it.
type Notifier interface {
	// Notify sends payload on channel through conn. Inside a transaction the
	// notification is delivered at commit.
	Notify(ctx context.Context, conn gorm.ConnPool, channel, payload string) error
	// Listen takes one connection out of db's pool, listens on channel, calls
	// ready once the database has confirmed the subscription, and then calls
	// fn with the payload of every notification, on Listen's goroutine, until
	// ctx ends or the connection fails. An empty payload means that
	// notifications may have been lost, whatever they named. It always
	// returns a non-nil error:
	// an error matching ErrCannotListen when db's connections cannot listen
	// (the driver has no way to, or notifications sent to the subscription
	// do not arrive, as behind a pooler in transaction mode; use polling),
	// otherwise the failure or the cancellation. A connection that
	// subscribed is then discarded, never returned to the pool with a
	// subscription on it.
	Listen(ctx context.Context, db *sql.DB, channel string, ready func(), fn func(payload string)) error
	// HoldsListenConn reports whether a listener keeps one of the pool's
	// connections for as long as it listens.
	HoldsListenConn() bool
}

// ErrCannotListen is returned by Notifier.Listen when the pool's driver has
// no way to wait for notifications, or notifications do not arrive. It
// wraps errors.ErrUnsupported.
var ErrCannotListen = fmt.Errorf("the driver cannot wait for notifications: %w", errors.ErrUnsupported)

// notifyWaits collects what Notify left to wait for under a context from
// DeferNotifyWaits.
type notifyWaits struct {
	mu  sync.Mutex
	fns []func()
}

type notifyWaitsKey struct{}

// DeferNotifyWaits returns a context under which Notify may leave part of
// its work to finish after the transaction (the KILLs of the MySQL family,
// sent from other goroutines, which Notify otherwise waits to see sent
// before it returns, holding the transaction's locks; SQLite's line in the
// notification file, which would otherwise wake candidates while the
// transaction still holds the write lock), and a function that does or
// waits for that work. A caller that begins and ends the transaction itself
// calls wait once it has ended, before it reports the notification sent;
// one running in a caller's transaction must not use it.
func DeferNotifyWaits(ctx context.Context) (_ context.Context, wait func()) {
	w := &notifyWaits{}
	return context.WithValue(ctx, notifyWaitsKey{}, w), func() {
		w.mu.Lock()
		fns := w.fns
		w.fns = nil
		w.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
	}
}

// deferNotifyWait hands wait to ctx's DeferNotifyWaits, reporting false
// when ctx has none (the caller then waits itself).
func deferNotifyWait(ctx context.Context, wait func()) bool {
	w, ok := ctx.Value(notifyWaitsKey{}).(*notifyWaits)
	if !ok {
		return false
	}
	w.mu.Lock()
	w.fns = append(w.fns, wait)
	w.mu.Unlock()
	return true
}
