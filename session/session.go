// Package session opens the database an election runs on, and joins
// transactions.
//
// Open turns a DSN into a *gorm.DB with the settings each database needs
// for elections to be correct under contention; OpenWrapped does the same
// with a hook around the driver's connector, for instrumentation; Wrap does
// the same for a *sql.DB the application already has. FromTx lets a
// transaction begun with database/sql take part in an election call
// (through election.WithTx), and Transaction runs a function in the caller's
// transaction or a new one.
package session

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/gormx"
)

// ErrDSN is wrapped by errors about a DSN that cannot be understood.
var ErrDSN = dialect.ErrDSN

// ErrUnreachable is wrapped by errors from Open when the database does not
// answer. The message names the host and port (or file), never the password.
var ErrUnreachable = errors.New("session: database unreachable")

// ErrUnsupportedDriver is wrapped by the error of Wrap for a pool of a
// driver other than pgx, go-sql-driver/mysql, mattn/go-sqlite3 or
// modernc.org/sqlite (lib/pq among them), and of WrapDialect for a lib/pq
// pool.
var ErrUnsupportedDriver = dialect.ErrUnsupportedDriver

// ErrNotTransaction is returned by FromTx for a nil transaction.
var ErrNotTransaction = errors.New("session: not a transaction")

// pingTimeout bounds how long Open waits for the database to answer.
const pingTimeout = 10 * time.Second

// Open connects to the database named by dsn and checks that it answers.
// Accepted forms:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   (also postgresql://, and h1:5432,h2:5432 for several hosts)
//	host=host port=5432 user=user password=pass dbname=db sslmode=disable   (libpq keyword/value)
//	mysql://user:pass@host:3306/db                       (also mysql://user:pass@tcp(host:3306)/db)
//	user:pass@tcp(host:3306)/db                          (the mysql driver's own form)
//	sqlite:/var/lib/app/app.db, file:app.db?..., app.db  (also sqlite::memory:)
//
// A SQLite DSN may choose its driver with driver=mattn (mattn/go-sqlite3,
// which needs cgo) or driver=modernc (modernc.org/sqlite, pure Go); without
// it, a program built with cgo uses mattn and one built without modernc.
// Both get the same settings, and mattn's PRAGMA parameters (such as
// _busy_timeout) work on either. A process that opened a file through one
// driver is refused the other on the same file (ErrDSN): the two would not
// see each other's locks.
//
// Errors wrap ErrDSN or ErrUnreachable; their messages name the host and
// port and never show the password.
//
// Open applies what each database needs and leaves everything else as given:
// PostgreSQL sessions in UTC, statements prepared once per connection when
// the server is reached directly and in pgx's exec mode behind a pooler (no
// named prepared statements, so that transaction poolers such as PgBouncer
// work),
// each host's connection attempt bounded (unless the DSN sets
// connect_timeout) by 5 s, or a tenth of the expiry window for the calls of
// package election, TCP keepalives and TCP_USER_TIMEOUT, and connections to
// a host that stopped answering closed; MySQL with parseTime, UTC times, the session
// time zone at +00:00, READ COMMITTED (so concurrent first elections do not
// deadlock on gap locks) and client-side parameter interpolation (one round
// trip a statement); SQLite in WAL mode with immediate transactions,
// synchronous=NORMAL and a 5 s busy timeout. A connection that answered
// that its server is read-only (a standby, default_transaction_read_only,
// read_only; a SQLite file the process may not write) or shutting down is
// discarded rather than reused. docs/api.md
// has the details. opts are passed to gorm.Open; without them the handle
// logs only slow queries and takes GORM's own timestamps in UTC.
func Open(dsn string, opts ...gorm.Option) (*gorm.DB, error) {
	return open(dsn, nil, opts)
}

// OpenWrapped opens dsn exactly as Open does, but runs the pool on the
// connector wrap returns for the driver's connector: the place to add
// instrumentation such as tracing, metrics or counting round trips. wrap is
// called once, for the pool the returned handle uses, and must return a
// connector that opens connections of the same driver (its Driver method
// should return the driver it was given, which Wrap and the election package
// rely on to tell databases apart). Statements Open runs while learning the
// server's version, on MySQL, go through a short-lived pool that is not
// wrapped. A nil wrap is the same as Open.
func OpenWrapped(dsn string, wrap func(driver.Connector) driver.Connector, opts ...gorm.Option) (*gorm.DB, error) {
	return open(dsn, wrap, opts)
}

func open(dsn string, wrap func(driver.Connector) driver.Connector, opts []gorm.Option) (*gorm.DB, error) {
	o, err := dialect.Open(dsn)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	sqlDB, err := openPool(o, wrap)
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(o.Dialect.Gorm(sqlDB), config(opts)...)
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("session: opening %s: %s", o.Target, o.Target.Scrub(err.Error()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if _, err := o.Dialect.Check(ctx, gormx.Quiet(db)); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("session: %s: %s", o.Target, o.Target.Scrub(err.Error()))
	}
	return db, nil
}

// openPool opens and pings the pool, reopening it when the dialect has to
// learn the server's version to finish the DSN. wrap, when not nil, wraps the
// connector of the pool that is returned.
func openPool(o dialect.Opened, wrap func(driver.Connector) driver.Connector) (*sql.DB, error) {
	c, err := connector(o)
	if err != nil {
		return nil, fmt.Errorf("session: %w: %s", ErrDSN, o.Target.Scrub(err.Error()))
	}
	if wrap != nil && o.AfterOpen == nil {
		if c = wrap(c); c == nil {
			return nil, errors.New("session: OpenWrapped: wrap returned a nil connector")
		}
	}
	sqlDB := sql.OpenDB(newPatientConnector(newDiscardConnector(c, o)))
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := ping(ctx, sqlDB, o.Dialect); err != nil {
		sqlDB.Close()
		return nil, &unreachable{target: o.Target.String(), msg: o.Target.Scrub(err.Error()), err: err}
	}
	if o.AfterOpen == nil {
		o.Pool.Apply(sqlDB)
		return sqlDB, nil
	}
	dsn, err := o.AfterOpen(sqlDB)
	if err != nil {
		sqlDB.Close()
		return nil, &unreachable{target: o.Target.String(), msg: o.Target.Scrub(err.Error()), err: err}
	}
	if dsn == "" {
		if wrap == nil {
			o.Pool.Apply(sqlDB)
			return sqlDB, nil
		}
		dsn = o.DSN
	}
	sqlDB.Close()
	o.AfterOpen = nil
	o.DSN = dsn
	return openPool(o, wrap)
}

// ping pings the pool until ctx ends, retrying after a short pause the
// errors the dialect says a new pool may get for a moment
// (dialect.RetryPing): on SQLite, processes opening the same new file at
// once get "database is locked" until one of them has switched it to WAL.
func ping(ctx context.Context, db *sql.DB, d dialect.Dialect) error {
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := db.PingContext(ctx)
		if err == nil || d == nil || !dialect.RetryPing(d, err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// connector is the dialect's connector for o's DSN, else what
// sql.Open(driverName, dsn) would run the pool on: the driver's own
// connector when it has one, else one that calls Driver.Open.
func connector(o dialect.Opened) (driver.Connector, error) {
	if o.Connector != nil {
		return o.Connector(o.DSN)
	}
	driverName, dsn := o.DriverName, o.DSN
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	d := probe.Driver()
	probe.Close()
	if dc, ok := d.(driver.DriverContext); ok {
		return dc.OpenConnector(dsn)
	}
	return dsnConnector{dsn: dsn, d: d}, nil
}

type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// unreachable keeps the driver error for errors.As while printing a
// message scrubbed of the password.
type unreachable struct {
	target string // dialect.Target.String(): never the password, even under %#v
	msg    string
	err    error
}

func (e *unreachable) Error() string {
	return fmt.Sprintf("session: database unreachable: %s: %s", e.target, e.msg)
}

func (e *unreachable) Unwrap() []error { return []error{ErrUnreachable, e.err} }

// Wrap builds a *gorm.DB on a pool the application opened itself with the
// pgx, mysql, sqlite3 (mattn/go-sqlite3) or sqlite (modernc.org/sqlite)
// driver. It checks the settings elections need (see
// Open) and returns an error naming a missing one; it does not change the
// pool.
//
// A pool opened through a wrapping driver, such as github.com/XSAM/otelsql
// for OpenTelemetry, is recognised by the connection underneath: Wrap takes
// one connection from the pool and looks through wrappers that expose the
// driver's connection with a Raw() driver.Conn or Unwrap() driver.Conn
// method (otelsql has Raw). The same lets PostgreSQL's LISTEN reach the pgx
// connection, so handoffs stay immediate. For a wrapper that hides the
// connection, name the database with WrapDialect.
//
// A pool of any other driver is refused with an error wrapping
// ErrUnsupportedDriver; a lib/pq pool (also behind a wrapper that exposes
// its connections) with one that says what to use instead: pgx's
// database/sql driver takes the same DSN. Elections rely on pgx's errors to
// tell a conflict to retry from a failure, and on its connections to LISTEN
// for handoffs; lib/pq is in maintenance mode.
func Wrap(sqlDB *sql.DB, opts ...gorm.Option) (*gorm.DB, error) {
	if sqlDB == nil {
		return nil, errors.New("session: Wrap needs a *sql.DB, got nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	d, err := dialect.ForPool(ctx, sqlDB)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	return wrap(sqlDB, d, opts)
}

// WrapDialect is Wrap for a pool whose database Wrap cannot recognise: a
// wrapping driver that hides the driver's connection. name is "postgres",
// "mysql" or "sqlite"; any other name is an error, and the pool is not
// touched. The pool's connections must still be of the pgx,
// go-sql-driver/mysql, mattn/go-sqlite3 or modernc.org/sqlite driver
// underneath (a pool whose
// driver shows itself as lib/pq's is refused, as by Wrap). On PostgreSQL,
// when LISTEN cannot reach the pgx connection, the Electors log once
// ("election: not listening for handoffs") and poll: a graceful handoff
// then takes up to one interval.
func WrapDialect(sqlDB *sql.DB, name string, opts ...gorm.Option) (*gorm.DB, error) {
	if sqlDB == nil {
		return nil, errors.New("session: WrapDialect needs a *sql.DB, got nil")
	}
	d, err := dialect.ByName(name)
	if err != nil {
		return nil, fmt.Errorf("session: WrapDialect: %w", err)
	}
	if err := dialect.RefuseLibPQ(dialect.UnwrapDriver(sqlDB.Driver())); err != nil {
		return nil, fmt.Errorf("session: WrapDialect: %w", err)
	}
	return wrap(sqlDB, d, opts)
}

func wrap(sqlDB *sql.DB, d dialect.Dialect, opts []gorm.Option) (*gorm.DB, error) {
	db, err := gorm.Open(d.Gorm(sqlDB), config(opts)...)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if _, err := d.Check(ctx, gormx.Quiet(db)); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	return db, nil
}

func config(opts []gorm.Option) []gorm.Option {
	if len(opts) > 0 {
		return opts
	}
	return []gorm.Option{&gorm.Config{
		Logger:  logger.Default.LogMode(logger.Warn),
		NowFunc: func() time.Time { return time.Now().UTC() },
	}}
}

// FromTx returns a handle on db's database that runs every statement in tx,
// a transaction the caller began with database/sql. Pass it to
// election.WithTx; the library never commits or rolls back tx.
func FromTx(db *gorm.DB, tx *sql.Tx) (*gorm.DB, error) {
	if db == nil {
		return nil, errors.New("session: FromTx needs the *gorm.DB the transaction belongs to")
	}
	if tx == nil {
		return nil, ErrNotTransaction
	}
	s := db.Session(&gorm.Session{NewDB: true, Context: context.Background()})
	s.Statement.ConnPool = tx
	return s, nil
}

// InTransaction reports whether db runs its statements in a transaction.
func InTransaction(db *gorm.DB) bool { return gormx.InTransaction(db) }

// Transaction runs fn in db's transaction when db is in one, and otherwise
// in a new transaction that it commits when fn returns nil and rolls back
// when fn fails. It never commits or rolls back a transaction it did not
// begin, and never opens a savepoint.
func Transaction(ctx context.Context, db *gorm.DB, opts *sql.TxOptions, fn func(tx *gorm.DB) error) error {
	if InTransaction(db) {
		return fn(db.WithContext(ctx))
	}
	if opts == nil {
		return db.WithContext(ctx).Transaction(fn)
	}
	return db.WithContext(ctx).Transaction(fn, opts)
}
