// Package rtcount counts the round trips a database/sql pool makes to its
// database, by wrapping the pool's driver.Connector.
//
// Every call that reaches the driver and, for a network database, costs one
// request and its answer counts one: Conn.ExecContext, Conn.QueryContext,
// Conn.PrepareContext, Stmt.ExecContext, Stmt.QueryContext, BeginTx, Commit,
// Rollback and Ping (and their context-free forms). A call the driver
// declines with driver.ErrSkip counts nothing, since database/sql then takes
// another route (prepare and execute) that is counted call by call. Opening
// a connection, resetting a pooled one, reading rows of a result and
// closing a statement are not counted.
//
// The count is of driver calls, which is the count of round trips for the
// drivers this module supports, with these exceptions: pgx sends an extra
// Parse/Describe exchange the first time a connection sees a statement text
// (it then caches it), and pings the server when the pool hands out a
// connection that was last handed out more than a second before;
// go-sql-driver/mysql sends two statements for a BeginTx with a non-default
// isolation level or read-only; SQLite has no network at all, so its count
// is of statements run in process.
//
// The wrapper changes nothing else. Its connections implement every
// optional interface database/sql looks for (ExecerContext, QueryerContext,
// ConnPrepareContext, ConnBeginTx, NamedValueChecker, SessionResetter,
// Validator, Pinger) and, where the driver's connection lacks one, do what
// database/sql does without it. Statements keep the driver's
// ColumnConverter if they have one. The driver's own connection is reachable
// through Unwrap, e.g. from sql.Conn.Raw.
package rtcount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"database/sql/driver"
)

// Kind is the kind of a counted call.
type Kind int

// The kinds of counted calls.
const (
	// Exec is a statement run on a connection without preparing it.
	Exec Kind = iota
	// Query is a query run on a connection without preparing it.
	Query
	// Prepare is a statement prepared on the server.
	Prepare
	// StmtExec is a prepared statement executed.
	StmtExec
	// StmtQuery is a prepared query executed.
	StmtQuery
	// Begin is a transaction begun.
	Begin
	// Commit is a transaction committed.
	Commit
	// Rollback is a transaction rolled back.
	Rollback
	// Ping is a connection checked with Ping.
	Ping
	numKinds
)

var kindNames = [numKinds]string{"exec", "query", "prepare", "stmt-exec", "stmt-query", "begin", "commit", "rollback", "ping"}

// String returns the kind's name, e.g. "exec".
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Counter counts the calls made through the connectors it wraps. The zero
// value is ready to use, and it is safe for concurrent use.
type Counter struct {
	n [numKinds]atomic.Int64
	// Observe, when set before Wrap, is called synchronously with every
	// counted call and its query text (empty for begin, commit, rollback,
	// ping and prepared statements' executions, which carry the text they
	// were prepared with).
	Observe func(k Kind, query string)
	// Before, when set before Wrap, is called synchronously before a
	// statement run on a connection without preparing it (Exec, Query) is
	// handed to the driver, with its kind and text: the place for a test
	// to make something happen between two statements of a call.
	Before func(k Kind, query string)
}

func (c *Counter) before(k Kind, query string) {
	if c.Before != nil {
		c.Before(k, query)
	}
}

// Wrap returns a connector that opens inner's connections and counts their
// calls on c. Its Driver method returns inner's driver, so code that asks a
// *sql.DB for its driver sees the real one.
func (c *Counter) Wrap(inner driver.Connector) driver.Connector {
	return &connector{inner: inner, c: c}
}

// Total returns the number of calls counted so far.
func (c *Counter) Total() int64 { return c.Snapshot().Total() }

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Counts {
	var s Counts
	for k := range s {
		s[k] = c.n[k].Load()
	}
	return s
}

// Reset sets every count back to zero.
func (c *Counter) Reset() {
	for k := range c.n {
		c.n[k].Store(0)
	}
}

func (c *Counter) add(k Kind, query string) {
	c.n[k].Add(1)
	if c.Observe != nil {
		c.Observe(k, query)
	}
}

// Counts holds a count per Kind, indexed by Kind.
type Counts [numKinds]int64

// Total returns the sum of the counts.
func (s Counts) Total() int64 {
	var t int64
	for _, n := range s {
		t += n
	}
	return t
}

// Sub returns s minus earlier, kind by kind: the calls made between two
// snapshots.
func (s Counts) Sub(earlier Counts) Counts {
	for k := range s {
		s[k] -= earlier[k]
	}
	return s
}

// String lists the non-zero counts, e.g. "begin=1 query=1 exec=2 commit=1".
func (s Counts) String() string {
	var parts []string
	for _, k := range []Kind{Begin, Prepare, Query, Exec, StmtQuery, StmtExec, Commit, Rollback, Ping} {
		if s[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, s[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// connector wraps a driver.Connector.
type connector struct {
	inner driver.Connector
	c     *Counter
}

func (k *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := k.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{inner: dc, c: k.c}, nil
}

func (k *connector) Driver() driver.Driver { return k.inner.Driver() }

// Close closes the inner connector when it has a Close method, as sql.DB.Close
// would have done.
func (k *connector) Close() error {
	if cl, ok := k.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// conn wraps a driver.Conn.
type conn struct {
	inner driver.Conn
	c     *Counter
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
)

// Unwrap returns the driver's own connection.
func (w *conn) Unwrap() driver.Conn { return w.inner }

func (w *conn) Prepare(query string) (driver.Stmt, error) {
	si, err := w.inner.Prepare(query)
	w.c.add(Prepare, query)
	if err != nil {
		return nil, err
	}
	return w.stmt(si, query), nil
}

func (w *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	pc, ok := w.inner.(driver.ConnPrepareContext)
	if !ok {
		// What database/sql does for a driver without PrepareContext.
		si, err := w.Prepare(query)
		if err == nil {
			select {
			default:
			case <-ctx.Done():
				si.Close()
				return nil, ctx.Err()
			}
		}
		return si, err
	}
	si, err := pc.PrepareContext(ctx, query)
	w.c.add(Prepare, query)
	if err != nil {
		return nil, err
	}
	return w.stmt(si, query), nil
}

func (w *conn) Close() error { return w.inner.Close() }

func (w *conn) Begin() (driver.Tx, error) {
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	tx, err := w.inner.Begin()
	w.c.add(Begin, "")
	if err != nil {
		return nil, err
	}
	return &txn{inner: tx, c: w.c}, nil
}

func (w *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	bt, ok := w.inner.(driver.ConnBeginTx)
	if !ok {
		// What database/sql does for a driver without BeginTx.
		if opts.Isolation != 0 {
			return nil, errors.New("sql: driver does not support non-default isolation level")
		}
		if opts.ReadOnly {
			return nil, errors.New("sql: driver does not support read-only transactions")
		}
		if ctx.Done() == nil {
			return w.Begin()
		}
		tx, err := w.Begin()
		if err == nil {
			select {
			default:
			case <-ctx.Done():
				tx.Rollback()
				return nil, ctx.Err()
			}
		}
		return tx, err
	}
	tx, err := bt.BeginTx(ctx, opts)
	w.c.add(Begin, "")
	if err != nil {
		return nil, err
	}
	return &txn{inner: tx, c: w.c}, nil
}

func (w *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	var (
		res driver.Result
		err error
	)
	w.c.before(Exec, query)
	switch x := w.inner.(type) {
	case driver.ExecerContext:
		res, err = x.ExecContext(ctx, query, args)
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	case driver.Execer:
		var vals []driver.Value
		if vals, err = values(args); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res, err = x.Exec(query, vals)
	default:
		return nil, driver.ErrSkip
	}
	if err == driver.ErrSkip {
		return nil, err
	}
	w.c.add(Exec, query)
	return res, err
}

func (w *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	var (
		rows driver.Rows
		err  error
	)
	w.c.before(Query, query)
	switch x := w.inner.(type) {
	case driver.QueryerContext:
		rows, err = x.QueryContext(ctx, query, args)
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	case driver.Queryer:
		var vals []driver.Value
		if vals, err = values(args); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rows, err = x.Query(query, vals)
	default:
		return nil, driver.ErrSkip
	}
	if err == driver.ErrSkip {
		return nil, err
	}
	w.c.add(Query, query)
	return rows, err
}

// CheckNamedValue is the driver's, or driver.ErrSkip (database/sql's
// default conversion) when it has none.
func (w *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := w.inner.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (w *conn) ResetSession(ctx context.Context) error {
	if r, ok := w.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (w *conn) IsValid() bool {
	if v, ok := w.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (w *conn) Ping(ctx context.Context) error {
	p, ok := w.inner.(driver.Pinger)
	if !ok {
		return nil
	}
	err := p.Ping(ctx)
	w.c.add(Ping, "")
	return err
}

func (w *conn) stmt(si driver.Stmt, query string) driver.Stmt {
	s := &stmt{inner: si, conn: w.inner, c: w.c, query: query}
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	if cc, ok := si.(driver.ColumnConverter); ok {
		return &stmtConverter{stmt: s, cc: cc}
	}
	return s
}

// values is database/sql's conversion for drivers without the context forms.
func values(named []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(named))
	for i, nv := range named {
		if nv.Name != "" {
			return nil, errors.New("sql: driver does not support the use of Named Parameters")
		}
		out[i] = nv.Value
	}
	return out, nil
}

// stmt wraps a driver.Stmt.
type stmt struct {
	inner driver.Stmt
	conn  driver.Conn
	c     *Counter
	query string
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	res, err := s.inner.Exec(args)
	s.c.add(StmtExec, s.query)
	return res, err
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	rows, err := s.inner.Query(args)
	s.c.add(StmtQuery, s.query)
	return rows, err
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if x, ok := s.inner.(driver.StmtExecContext); ok {
		res, err := x.ExecContext(ctx, args)
		s.c.add(StmtExec, s.query)
		return res, err
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Exec(vals)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if x, ok := s.inner.(driver.StmtQueryContext); ok {
		rows, err := x.QueryContext(ctx, args)
		s.c.add(StmtQuery, s.query)
		return rows, err
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Query(vals)
}

// CheckNamedValue is the statement's checker, else the connection's (the
// order database/sql looks for them in), else driver.ErrSkip, which sends
// database/sql on to the column converter or its default conversion just as
// if neither existed.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.inner.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	if ch, ok := s.conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// stmtConverter is a stmt whose driver statement has a ColumnConverter.
type stmtConverter struct {
	*stmt
	//lint:ignore SA1019 forwarded as the driver has it; database/sql still calls it
	cc driver.ColumnConverter
}

func (s *stmtConverter) ColumnConverter(idx int) driver.ValueConverter {
	return s.cc.ColumnConverter(idx)
}

// txn wraps a driver.Tx.
type txn struct {
	inner driver.Tx
	c     *Counter
}

func (t *txn) Commit() error {
	err := t.inner.Commit()
	t.c.add(Commit, "")
	return err
}

func (t *txn) Rollback() error {
	err := t.inner.Rollback()
	t.c.add(Rollback, "")
	return err
}
