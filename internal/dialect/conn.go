package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// Discard reports whether a connection that returned err must leave the
// pool: its server said it accepts no writes (ReadOnly: a standby, or a
// primary set read-only) or is shutting down (Shutdown). Such a connection
// would answer the same way to every later statement, even once a failover
// or a switch back to read-write has made its address (or another of the
// DSN's hosts) writable again; a new connection reaches the writable server.
//
// So is a connection whose user lacked a privilege (Permission) on a server
// that applies a GRANT of privileges on a database to an open session only
// at its next USE (MySQL, MariaDB): the user's pooled sessions would go on
// refusing after the grant for as long as they lived, and a new connection
// has the privileges granted so far. PostgreSQL checks privileges at every
// statement, so its connections stay.
func Discard(d Dialect, err error) bool {
	if err == nil || discardOff.Load() {
		return false
	}
	switch d.Classify(err) {
	case ReadOnly, Shutdown:
		return true
	case Permission:
		s, ok := d.(interface{ sessionGrants() bool })
		return ok && s.sessionGrants()
	}
	return false
}

// discardOff is set by DisableDiscard.
var discardOff atomic.Bool

// DisableDiscard makes Discard report false for every error, in every
// pool, until restore is called: pools then reuse connections that
// answered read-only or lacked a privilege, as database/sql does by
// default. It is a test hook,
// for the negative controls of the tests that prove the discarding (a
// failover test that passes with it set proves nothing about the
// discarding); nothing else calls it.
func DisableDiscard() (restore func()) {
	discardOff.Store(true)
	return func() { discardOff.Store(false) }
}

type connectTimeoutKey struct{}

// WithConnectTimeout returns ctx carrying a bound d for each host's
// connection attempt made on its behalf. Package election passes one derived
// from its expiry window; it applies only where the DSN sets no
// connect_timeout, and only when shorter than the default.
func WithConnectTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, connectTimeoutKey{}, d)
}

// BoundConn returns pool with every statement's context carrying d
// (WithConnectTimeout): the statements run under their caller's context,
// which the bound cannot replace.
func BoundConn(pool gorm.ConnPool, d time.Duration) gorm.ConnPool { return boundConn{pool, d} }

type boundConn struct {
	pool gorm.ConnPool
	d    time.Duration
}

func (b boundConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return b.pool.PrepareContext(WithConnectTimeout(ctx, b.d), query)
}

func (b boundConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return b.pool.ExecContext(WithConnectTimeout(ctx, b.d), query, args...)
}

func (b boundConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return b.pool.QueryContext(WithConnectTimeout(ctx, b.d), query, args...)
}

func (b boundConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return b.pool.QueryRowContext(WithConnectTimeout(ctx, b.d), query, args...)
}

// connectTimeoutFrom is the bound WithConnectTimeout put in ctx, if any.
func connectTimeoutFrom(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(connectTimeoutKey{}).(time.Duration)
	return d, ok && d > 0
}

// HostCheck lets a pool find the connections it holds to a host that
// stopped answering (a frozen VM, a stopped server process, a cut route),
// which can otherwise hold their callers for as long as the host stays
// silent: the host's kernel may still acknowledge what is sent, so neither
// keepalives nor TCP_USER_TIMEOUT notice.
type HostCheck struct {
	// Addr is the remote address conn is connected to, "" when unknown.
	Addr func(conn driver.Conn) string
	// Silent opens a new connection to addr, bounded by d, and reports
	// whether the server failed to answer in time (an answer that refuses
	// the connection still counts as an answer).
	Silent func(ctx context.Context, addr string, d time.Duration) bool
	// Sever closes conn's socket, from any goroutine, so that a call
	// waiting on it fails.
	Sever func(conn driver.Conn)
	// Passed lists the addresses of the hosts a multi-host DSN names before
	// the one conn is connected to: hosts the new connection passed over
	// (refused, silent, or read-only), whose pooled connections are worth
	// checking.
	Passed func(conn driver.Conn) []string
}
