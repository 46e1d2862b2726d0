package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

var _ Notifier = postgres{}

// HoldsListenConn is true: a listener keeps its connection subscribed.
func (postgres) HoldsListenConn() bool { return true }

// Notify runs pg_notify, which inside a transaction queues the notification
// until commit (and drops it on rollback).
func (postgres) Notify(ctx context.Context, conn gorm.ConnPool, channel, payload string) error {
	_, err := conn.ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, payload)
	return err
}

// probePrefix starts the payload of the notification Listen sends itself to
// check that notifications arrive. Listen never passes such a payload to
// its callback (another process's probe reaches every listener).
const probePrefix = "sqlelect-listen-probe:"

// probeTimeout bounds the wait for Listen's own probe notification. On a
// direct connection it arrives in well under a millisecond.
var probeTimeout = 3 * time.Second

// Listen needs the pgx driver: database/sql has no way to wait for a
// notification, so it reaches the *pgx.Conn under a pooled connection.
//
// A LISTEN that succeeds does not mean notifications will arrive: behind a
// connection pooler in transaction mode (PgBouncer) the LISTEN runs on a
// server session that goes back to the pooler's pool when the statement
// ends, and notifications are never delivered to this connection. So after
// LISTEN, Listen sends a notification with a payload of its own through
// another of db's connections and waits up to probeTimeout for it; when it
// does not come, Listen returns ErrCannotListen, saying why, and the caller
// polls.
func (postgres) Listen(ctx context.Context, db *sql.DB, channel string, ready func(), fn func(string)) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		// A wrapping connector (session.OpenWrapped, otelsql) hands out its
		// own connection; look through wrappers that expose the driver's.
		sc, ok := UnwrapConn(dc).(*stdlib.Conn)
		if !ok {
			return ErrCannotListen
		}
		c := sc.Conn()
		// From here on, any way out discards the connection (ErrBadConn):
		// it must not go back to the pool still subscribed.
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return fmt.Errorf("%w: LISTEN: %w", driver.ErrBadConn, err)
		}
		early, err := probeListen(ctx, db, c, channel)
		if err != nil {
			return err
		}
		ready()
		for _, p := range early {
			fn(p)
		}
		for {
			n, err := c.WaitForNotification(ctx)
			if err != nil {
				return fmt.Errorf("%w: waiting for notifications: %w", driver.ErrBadConn, err)
			}
			if !strings.HasPrefix(n.Payload, probePrefix) {
				fn(n.Payload)
			}
		}
	})
}

// probeListen sends a notification on channel through another of db's
// connections and waits for it on c, which listens on channel. It returns
// the other payloads that arrived meanwhile. Every error it returns
// discards c (driver.ErrBadConn); ErrCannotListen when the probe was sent
// and did not arrive.
func probeListen(ctx context.Context, db *sql.DB, c *pgx.Conn, channel string) ([]string, error) {
	probe := probePrefix + uuid.NewString()
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := db.ExecContext(pctx, "SELECT pg_notify($1, $2)", channel, probe); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", driver.ErrBadConn, ctx.Err())
		}
		return nil, fmt.Errorf("%w: sending a probe notification: %w", driver.ErrBadConn, err)
	}
	var early []string
	for {
		n, err := c.WaitForNotification(pctx)
		if err != nil {
			if ctx.Err() == nil && pctx.Err() != nil {
				return nil, notDelivered{fmt.Sprintf("notifications do not arrive: LISTEN succeeded, but a notification sent to it did not arrive within %v "+
					"(a connection pooler in transaction mode, such as PgBouncer, keeps them from this connection)", probeTimeout)}
			}
			return nil, fmt.Errorf("%w: waiting for the probe notification: %w", driver.ErrBadConn, err)
		}
		switch {
		case n.Payload == probe:
			return early, nil
		case !strings.HasPrefix(n.Payload, probePrefix):
			early = append(early, n.Payload)
		}
	}
}

// notDelivered is Listen's error when its probe notification did not arrive:
// it matches ErrCannotListen, and driver.ErrBadConn so that the subscribed
// connection is discarded.
type notDelivered struct{ msg string }

func (e notDelivered) Error() string { return e.msg }
func (notDelivered) Unwrap() []error { return []error{ErrCannotListen, driver.ErrBadConn} }
