package session

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// Connections that must not be reused.
//
// A server that answers "read-only" (PostgreSQL 25006: a standby, or
// default_transaction_read_only; MySQL and MariaDB 1290 and 1792: read_only)
// or "shutting down" (57P01 to 57P03) answers so on that connection for as
// long as it lives. database/sql puts it back in the pool all the same: after
// a primary was switched read-only and back, every round failed with 25006
// on the pooled sessions until they were terminated from outside. The pool
// Open builds discards such a connection instead, when it is next handed
// out, and opens a new one, which reaches the writable server (another host
// of a multi-host DSN with target_session_attrs=read-write, or the same one
// once it is writable again).
//
// The same goes on MySQL and MariaDB for a connection whose user lacked a
// privilege (1142, 1143, 1044): those servers apply a GRANT of privileges
// on a database to an open session only at its next USE, which nothing
// sends, so after the GRANT every round on the pooled sessions went on
// failing with "INSERT, UPDATE command denied" until the pool's connection
// lifetime ran out. A new connection has the privileges granted so far.
// PostgreSQL checks privileges at every statement (42501 discards nothing).
//
// It also bounds the check a driver makes of a connection it hands out again
// (pgx pings one unused for over a second) by the dialect's ResetTimeout, so
// that a pooled connection to a host that stopped answering is discarded
// instead of holding a caller whose context has no deadline.

//
// And when a call on one of its connections runs out of time (its context's
// deadline passed, as an election round's does), the pool asks whether the
// host answers at all (and so does a new connection that had to pass over
// the hosts a multi-host DSN lists before its own, about those hosts): it
// opens a new connection to that address, bounded
// like a connection attempt. When that gets no answer either, no connection
// to the host is handed out again, and those in a call whose context has no
// deadline are closed at once, so that the call fails instead of waiting
// for a host that may never come back: after a failover away from a frozen
// primary, a leader's guarded writes on pooled connections to it otherwise
// hung while its renewals, on new connections, reached the new primary and
// kept the term. A call with a deadline ends by it, as it would have. A host
// that is merely slow answers the new connection, and nothing changes.

// discardConnector wraps the connector of a pool that Open builds.
type discardConnector struct {
	inner driver.Connector
	d     dialect.Dialect
	reset func(context.Context) time.Duration // nil: no bound
	check *dialect.HostCheck                  // nil: no check of silent hosts

	mu       sync.Mutex
	conns    map[*discardConn]struct{} // open connections with a known address
	checking map[string]bool           // addresses being checked
	closing  context.Context           // ends the checks when the pool closes
	close    context.CancelFunc
	wg       sync.WaitGroup // checks under way
}

func newDiscardConnector(inner driver.Connector, o dialect.Opened) *discardConnector {
	c := &discardConnector{inner: inner, d: o.Dialect, reset: o.ResetTimeout, check: o.HostCheck,
		conns: map[*discardConn]struct{}{}, checking: map[string]bool{}}
	c.closing, c.close = context.WithCancel(context.Background())
	return c
}

func (c *discardConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	dc := &discardConn{inner: conn, c: c}
	if c.check != nil {
		if dc.addr = c.check.Addr(conn); dc.addr != "" {
			c.mu.Lock()
			c.conns[dc] = struct{}{}
			c.mu.Unlock()
		}
		for _, addr := range c.check.Passed(conn) {
			c.timedOut(ctx, addr)
		}
	}
	return dc, nil
}

// timedOut checks, once at a time per address, whether addr answers a new
// connection, and severs every connection to it when it does not.
func (c *discardConnector) timedOut(ctx context.Context, addr string) {
	bound := 5 * time.Second
	if c.reset != nil {
		bound = c.reset(ctx)
	}
	if bound <= 0 {
		// The DSN waits for ever on a connection attempt: no host is silent
		// then, and a check without a bound would end at once or never.
		return
	}
	c.mu.Lock()
	if c.checking[addr] || c.closing.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.checking[addr] = true
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		cctx, cancel := context.WithTimeout(c.closing, 2*bound)
		silent := c.check.Silent(cctx, addr, bound)
		cancel()
		c.mu.Lock()
		delete(c.checking, addr)
		var sever []*discardConn
		if silent {
			for dc := range c.conns {
				if dc.addr == addr {
					dc.bad.Store(true)
					if dc.waitsForever() {
						sever = append(sever, dc)
					}
				}
			}
		}
		c.mu.Unlock()
		for _, dc := range sever {
			c.check.Sever(dc.inner)
		}
	}()
}

func (c *discardConnector) Driver() driver.Driver { return c.inner.Driver() }

// Close ends the checks under way and closes the inner connector if it can
// be closed, as sql.DB.Close would have.
func (c *discardConnector) Close() error {
	c.mu.Lock()
	c.close()
	c.mu.Unlock()
	c.wg.Wait()
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// discardConn is a connection of a discardConnector. It implements every
// optional interface database/sql looks for and, where the inner
// connection lacks one, does what database/sql does without it.
type discardConn struct {
	inner driver.Conn
	c     *discardConnector
	addr  string      // the server's address, when c checks silent hosts
	bad   atomic.Bool // an error said the server will not serve this connection

	// calls counts the calls under way without a deadline (database/sql
	// makes one at a time, but a Tx's statements and its Rollback on a
	// cancelled context can overlap).
	calls atomic.Int32
}

// track counts a call under ctx while it runs when ctx has no deadline;
// call the function it returns when the call ends.
func (dc *discardConn) track(ctx context.Context) func() {
	if dc.addr == "" {
		return func() {}
	}
	if _, ok := ctx.Deadline(); ok {
		return func() {}
	}
	dc.calls.Add(1)
	return func() { dc.calls.Add(-1) }
}

// waitsForever reports whether a call without a deadline is under way.
func (dc *discardConn) waitsForever() bool { return dc.calls.Load() > 0 }

var (
	_ driver.ConnPrepareContext = (*discardConn)(nil)
	_ driver.ConnBeginTx        = (*discardConn)(nil)
	_ driver.ExecerContext      = (*discardConn)(nil)
	_ driver.QueryerContext     = (*discardConn)(nil)
	_ driver.Pinger             = (*discardConn)(nil)
	_ driver.SessionResetter    = (*discardConn)(nil)
	_ driver.Validator          = (*discardConn)(nil)
	_ driver.NamedValueChecker  = (*discardConn)(nil)
)

// Unwrap returns the driver's own connection, looking through the
// connections of a connector OpenWrapped's wrap returned (Unwrap or Raw,
// at most 16 deep).
func (dc *discardConn) Unwrap() driver.Conn {
	conn := dc.inner
	for i := 0; i < 16; i++ {
		switch u := conn.(type) {
		case interface{ Unwrap() driver.Conn }:
			conn = u.Unwrap()
		case interface{ Raw() driver.Conn }:
			conn = u.Raw()
		default:
			return conn
		}
	}
	return conn
}

// note marks the connection for discarding when err says so, and has its
// host checked when the call ran out of time. It returns err.
func (dc *discardConn) note(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if dialect.Discard(dc.c.d, err) {
		dc.bad.Store(true)
	}
	if dc.addr != "" && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		dc.c.timedOut(ctx, dc.addr)
	}
	return err
}

func (dc *discardConn) Prepare(query string) (driver.Stmt, error) {
	s, err := dc.inner.Prepare(query)
	return s, dc.note(context.Background(), err)
}

func (dc *discardConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	defer dc.track(ctx)()
	if p, ok := dc.inner.(driver.ConnPrepareContext); ok {
		s, err := p.PrepareContext(ctx, query)
		return s, dc.note(ctx, err)
	}
	return dc.Prepare(query)
}

func (dc *discardConn) Close() error {
	if dc.addr != "" {
		dc.c.mu.Lock()
		delete(dc.c.conns, dc)
		dc.c.mu.Unlock()
	}
	return dc.inner.Close()
}

func (dc *discardConn) Begin() (driver.Tx, error) {
	//lint:ignore SA1019 driver.Conn requires Begin.
	tx, err := dc.inner.Begin()
	return tx, dc.note(context.Background(), err)
}

func (dc *discardConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	defer dc.track(ctx)()
	if b, ok := dc.inner.(driver.ConnBeginTx); ok {
		tx, err := b.BeginTx(ctx, opts)
		return tx, dc.note(ctx, err)
	}
	if opts.Isolation != 0 || opts.ReadOnly {
		return nil, errors.New("session: the driver does not support transaction options")
	}
	return dc.Begin()
}

func (dc *discardConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	defer dc.track(ctx)()
	e, ok := dc.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	return r, dc.note(ctx, err)
}

func (dc *discardConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	defer dc.track(ctx)()
	q, ok := dc.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := q.QueryContext(ctx, query, args)
	return r, dc.note(ctx, err)
}

func (dc *discardConn) Ping(ctx context.Context) error {
	defer dc.track(ctx)()
	if p, ok := dc.inner.(driver.Pinger); ok {
		return dc.note(ctx, p.Ping(ctx))
	}
	return nil
}

// ResetSession refuses a connection marked for discarding, and bounds the
// driver's own check by the dialect's ResetTimeout (unless that is 0: no
// bound).
func (dc *discardConn) ResetSession(ctx context.Context) error {
	if dc.bad.Load() {
		return driver.ErrBadConn
	}
	r, ok := dc.inner.(driver.SessionResetter)
	if !ok {
		return nil
	}
	if dc.c.reset != nil {
		// 0: no bound (connect_timeout=0). A context that had already run
		// out would fail every check, and with it every connection handed
		// out again after a second unused.
		if d := dc.c.reset(ctx); d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
	}
	return dc.note(ctx, r.ResetSession(ctx))
}

func (dc *discardConn) IsValid() bool {
	if dc.bad.Load() {
		return false
	}
	if v, ok := dc.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (dc *discardConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := dc.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
