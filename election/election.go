package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/gormx"
	"github.com/sqlelect/sqlelect/internal/stmtcache"
)

// Election runs the election of one namespace on one database. It is safe
// for concurrent use; make one per namespace and share it.
type Election struct {
	db        *gorm.DB
	d         dialect.Dialect
	namespace string
	schema    string // PostgreSQL schema of the tables (WithSchema), or ""
	expire    time.Duration
	log       *slog.Logger // logBase with the namespace
	logBase   *slog.Logger // WithLogger's
	txOpts    *sql.TxOptions
	q         *dialect.Statements // the protocol's SQL, shared by every Election on the dialect and schema
	observer  Observer            // nil when none (WithObserver)
	identity  Identity            // written with every candidate row and granted term
	retention time.Duration       // of ended terms in the history

	mu        sync.Mutex
	held      map[uuid.UUID]Lease // leases this value granted or renewed, for the one-statement renewal
	seen      seatHint            // the holder of the seat at the last reading, for Elect's unlocked path
	lastPrune time.Time           // monotonic
	vacated   []func(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error

	handoffOnce sync.Once // registers the wake-up hook once (handoff.go)

	// rowsKept is set on a Group's Election of one namespace once a round
	// of the Group has written its candidate row there: the rounds keep
	// the row, and Elect neither creates nor refreshes it. An attempt then
	// writes only the seat and the history, so it never waits for the
	// Group's own round, which holds the candidate rows until it commits,
	// while it holds a seat's lock that another process's renewal needs.
	rowsKept atomic.Bool

	stmts  *stmtcache.Cache // prepared statements, for dialects that gain from them (stmtcache.go)
	parent *Election        // the Election whose stmts this one shares (inNamespace), kept reachable
}

// New binds an election to db and a namespace. It checks the options and the
// database's settings, and never changes db's configuration: the Election
// works on its own GORM session. The tables need not exist yet; calls
// return ErrNotMigrated until migrate.Up has run.
//
// db must be a database handle, not a transaction (pass those to the calls
// with WithTx). New refuses, with ErrUnsafeDatabase and the setting to add,
// a database whose settings break elections under contention: a SQLite file
// not in WAL mode or without a busy timeout, a MySQL handle without
// parseTime or not in UTC. session.Open applies all of them.
//
// New's database calls are bounded by 10 seconds; NewContext takes a
// context instead.
func New(db *gorm.DB, opts ...Option) (*Election, error) {
	ctx, cancel := context.WithTimeout(context.Background(), newTimeout)
	defer cancel()
	return NewContext(ctx, db, opts...)
}

// newTimeout bounds the database calls of New (the settings check).
const newTimeout = 10 * time.Second

// NewContext is New with ctx bounding its database calls (the check of the
// database's settings) in place of New's 10 seconds. ctx is used only while
// NewContext runs: the Election keeps no reference to it. It returns
// ErrInvalidOption for a nil ctx, and an error matching ctx.Err() when ctx
// ends before the check is done.
func NewContext(ctx context.Context, db *gorm.DB, opts ...Option) (*Election, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	c := config{namespace: DefaultNamespace, expire: DefaultExpire, logger: slog.Default(), retention: DefaultHistoryRetention}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		o.apply(&c)
	}
	if err := validNamespace(c.namespace); err != nil {
		return nil, err
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if db == nil || db.Statement == nil || db.Dialector == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalidOption)
	}
	if gormx.InTransaction(db) {
		return nil, fmt.Errorf("%w: New needs a database handle, not a transaction; pass transactions to calls with WithTx", ErrInvalidOption)
	}
	d, err := dialect.For(db)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if c.schema != "" {
		if d, err = dialect.InSchema(d, c.schema); err != nil {
			return nil, fmt.Errorf("%w: WithSchema: %w", ErrInvalidOption, err)
		}
	}
	// A session of our own: the caller's *gorm.DB and its Config stay as
	// they were. Statements go straight to the pool, so GORM's logger would
	// see nothing but what Check runs; and they skip GORM's
	// prepared-statement cache, which turns errors such as a missing table
	// into a panic.
	own := gormx.Quiet(db)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("election: checking the database: %w", err)
	}
	if d, err = dialect.Detect(ctx, own, d); err != nil {
		return nil, fmt.Errorf("election: checking the database: %w", err)
	}
	txOpts, err := d.Check(ctx, own)
	if err != nil {
		if errors.Is(err, errUnsafe) {
			return nil, fmt.Errorf("%w: %w", ErrUnsafeDatabase, err)
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return nil, fmt.Errorf("election: checking the database: %w: %w", cerr, err)
		}
		return nil, fmt.Errorf("election: checking the database: %w", err)
	}
	e := &Election{
		db:        own,
		d:         d,
		namespace: c.namespace,
		schema:    c.schema,
		expire:    c.expire,
		log:       c.logger.With("namespace", c.namespace),
		logBase:   c.logger,
		txOpts:    txOpts,
		q:         d.Statements(),
		identity:  localIdentity(c.label),
		retention: c.retention,
		held:      map[uuid.UUID]Lease{},
		observer:  c.observer,
	}
	// Every vacated seat wakes the Electors waiting for it (handoff.go),
	// whether or not this Election runs any.
	e.registerHandoff()
	e.useStmtCache()
	return e, nil
}

// ForNamespace returns an Election with e's settings (schema, expiry
// window, logger, label, observer, history retention) in namespace ns,
// without checking the database again: the cheap way to reach many
// namespaces. It returns ErrInvalidNamespace for an invalid namespace.
func (e *Election) ForNamespace(ns string) (*Election, error) {
	if err := validNamespace(ns); err != nil {
		return nil, err
	}
	return e.inNamespace(ns), nil
}

// inNamespace returns an Election with e's settings, checks and prepared
// statements in namespace ns (a valid one), without a database call.
func (e *Election) inNamespace(ns string) *Election {
	n := &Election{
		db:        e.db,
		d:         e.d,
		namespace: ns,
		schema:    e.schema,
		expire:    e.expire,
		log:       withAttrsLater(e.logBase, slog.String("namespace", ns)),
		logBase:   e.logBase,
		txOpts:    e.txOpts,
		q:         e.q,
		identity:  e.identity,
		retention: e.retention,
		held:      map[uuid.UUID]Lease{},
		observer:  e.observer,
		stmts:     e.stmts,
		parent:    e,
	}
	n.registerHandoff()
	return n
}

// Namespace returns the namespace the Election is bound to.
func (e *Election) Namespace() string { return e.namespace }

// Expire returns the expiry window.
func (e *Election) Expire() time.Duration { return e.expire }

// Identity returns the identity the Election writes with its candidates:
// this process's hostname and id, and the label given to WithLabel.
func (e *Election) Identity() Identity { return e.identity }
