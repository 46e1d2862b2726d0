package election

import (
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// Defaults of New's options.
const (
	// DefaultNamespace is the namespace of an Election made without WithNamespace.
	DefaultNamespace = "default"
	// DefaultExpire is the expiry window of an Election made without WithExpire.
	DefaultExpire = 60 * time.Second
	// MaxNamespaceLen is the longest namespace, in bytes.
	MaxNamespaceLen = 191
	// DefaultHistoryRetention is how long Prune keeps ended terms in the
	// history of an Election made without WithHistoryRetention.
	DefaultHistoryRetention = 30 * 24 * time.Hour
)

// An Option configures New.
type Option interface {
	apply(*config)
}

type config struct {
	namespace string
	expire    time.Duration
	logger    *slog.Logger
	schema    string
	observer  Observer
	label     string
	retention time.Duration
	errs      []error
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithNamespace binds the Election to namespace ns (default "default").
// Unrelated subsystems sharing a database use different namespaces; each has
// its own leader and its own terms. ns is stored as given: it must be 1 to
// MaxNamespaceLen bytes of UTF-8 without NUL bytes, or New returns
// ErrInvalidNamespace.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) { c.namespace = ns })
}

// WithSchema keeps the Election's tables in a PostgreSQL schema instead of
// the connection's search path (usually public): every statement names the
// tables qualified by the quoted schema, so two applications can share one
// database without sharing tables, and the tables stay out of public. Create
// them there with migrate.Up and migrate.WithSchema (the same name). Any
// name of 1 to 63 bytes of UTF-8 without NUL bytes is accepted; it is
// always quoted, so "Jobs" and "jobs" are two schemas. Elections in
// different schemas are independent even with the same namespace. On MySQL,
// where a schema is a database, and on SQLite, New returns
// ErrInvalidOption: name another database in the DSN instead.
func WithSchema(name string) Option {
	return optionFunc(func(c *config) {
		if err := dialect.ValidSchema(name); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithSchema: %w", ErrInvalidOption, err))
			return
		}
		c.schema = name
	})
}

// WithExpire sets the expiry window (default 60s): every RegisterCandidate,
// Heartbeat and Elect extends the candidate row, and every Elect that leaves
// the caller leading extends the lease, to the database clock's now plus d.
// Callers must call Elect more often than d to keep leading. d must be
// positive and at least a millisecond (SQLite's clock resolution).
func WithExpire(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Millisecond {
			c.errs = append(c.errs, fmt.Errorf("%w: expire must be at least 1ms, got %v", ErrInvalidOption, d))
			return
		}
		c.expire = d
	})
}

// WithLogger sets where the Election and its Electors log (default
// slog.Default()). Pass a logger with a discarding handler to silence them.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil logger", ErrInvalidOption))
			return
		}
		c.logger = l
	})
}

// WithHistoryRetention sets how long ended terms stay in the history
// (default DefaultHistoryRetention, 30 days): Prune, which the leader runs
// now and then, deletes the terms that ended longer ago than d. Terms that
// have not ended are kept whatever their age. d must be at least a second.
func WithHistoryRetention(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Second {
			c.errs = append(c.errs, fmt.Errorf("%w: history retention must be at least 1s, got %v", ErrInvalidOption, d))
			return
		}
		c.retention = d
	})
}

func validNamespace(ns string) error {
	switch {
	case ns == "":
		return fmt.Errorf("%w: empty", ErrInvalidNamespace)
	case len(ns) > MaxNamespaceLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidNamespace, len(ns), MaxNamespaceLen)
	case !utf8.ValidString(ns):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidNamespace)
	}
	for i := 0; i < len(ns); i++ {
		if ns[i] == 0 {
			return fmt.Errorf("%w: contains a NUL byte", ErrInvalidNamespace)
		}
	}
	return nil
}

// A CallOption configures one protocol call.
type CallOption interface {
	applyCall(*callConfig)
}

type callConfig struct {
	tx  *gorm.DB
	err error
}

type callOptionFunc func(*callConfig)

func (f callOptionFunc) applyCall(c *callConfig) { f(c) }

// WithTx runs the call inside tx, a transaction the caller began (with
// db.Begin, db.Transaction, or session.FromTx for a *sql.Tx). The library
// neither begins, commits nor rolls back tx: the call's writes commit or
// vanish with the caller's. Transient conflicts are then not retried but
// returned wrapped in ErrConflict, since the database has aborted the
// transaction. tx must be on the same kind of database as the Election, or
// the call returns ErrInvalidOption.
func WithTx(tx *gorm.DB) CallOption {
	return callOptionFunc(func(c *callConfig) {
		if tx == nil {
			c.err = fmt.Errorf("%w: WithTx(nil)", ErrInvalidOption)
			return
		}
		c.tx = tx
	})
}
