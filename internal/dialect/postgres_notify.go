package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

var _ Notifier = postgres{}

// Notify runs pg_notify, which inside a transaction queues the notification
// until commit (and drops it on rollback).
func (postgres) Notify(ctx context.Context, conn gorm.ConnPool, channel, payload string) error {
	_, err := conn.ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, payload)
	return err
}

// Listen needs the pgx driver: database/sql has no way to wait for a
// notification, so it reaches the *pgx.Conn under a pooled connection.
func (postgres) Listen(ctx context.Context, db *sql.DB, channel string, ready func(), fn func(string)) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		// A wrapping connector (session.OpenWrapped) hands out its own
		// connection; look through wrappers that expose the driver's.
		for {
			u, ok := dc.(interface{ Unwrap() driver.Conn })
			if !ok {
				break
			}
			dc = u.Unwrap()
		}
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return ErrCannotListen
		}
		c := sc.Conn()
		// From here on, any way out discards the connection (ErrBadConn):
		// it must not go back to the pool still subscribed.
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return fmt.Errorf("%w: LISTEN: %w", driver.ErrBadConn, err)
		}
		ready()
		for {
			n, err := c.WaitForNotification(ctx)
			if err != nil {
				return fmt.Errorf("%w: waiting for notifications: %w", driver.ErrBadConn, err)
			}
			fn(n.Payload)
		}
	})
}
