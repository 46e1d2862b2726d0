package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/gormx"
)

// Lease is the state of a namespace's leadership seat as one call saw it.
type Lease struct {
	// Namespace is the election the lease belongs to.
	Namespace string
	// Leader is the candidate holding the lease; uuid.Nil when the seat is
	// vacant or the lease has expired.
	Leader uuid.UUID
	// Term is the fencing token of the lease: it grows by one each time the
	// lease goes to a candidate that did not already hold it. Within a term
	// exactly one candidate leads. Zero when vacant.
	Term int64
	// ExpiresAt is when the lease ends, by the database clock (UTC).
	ExpiresAt time.Time
	// AcquiredAt is when the term began, by the database clock (UTC).
	AcquiredAt time.Time
}

// Vacant reports whether the lease names no leader.
func (l Lease) Vacant() bool { return l.Leader == uuid.Nil }

// HeldBy reports whether the lease names id as its leader.
func (l Lease) HeldBy(id uuid.UUID) bool { return id != uuid.Nil && l.Leader == id }

// Election runs the election of one namespace on one database. It is safe
// for concurrent use; make one per namespace and share it.
type Election struct {
	db        *gorm.DB
	d         dialect.Dialect
	namespace string
	expire    time.Duration
	log       *slog.Logger
	txOpts    *sql.TxOptions
	q         queries

	mu        sync.Mutex
	held      map[uuid.UUID]Lease // leases this value granted or renewed, for the one-statement renewal
	lastPrune time.Time           // monotonic
	vacated   []func(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error

	handoffOnce sync.Once // registers the wake-up hook once (handoff.go)

	stmts *stmtCache // prepared statements, for dialects that gain from them (stmtcache.go)
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
	c := config{namespace: DefaultNamespace, expire: DefaultExpire, logger: slog.Default()}
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
	// A session of our own: the caller's *gorm.DB and its Config stay as
	// they were. Statements go straight to the pool, so GORM's logger would
	// see nothing but what Check runs; and they skip GORM's
	// prepared-statement cache, which turns errors such as a missing table
	// into a panic.
	own := gormx.Quiet(db)
	if err := ctx.Err(); err != nil {
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
		expire:    c.expire,
		log:       c.logger.With("namespace", c.namespace),
		txOpts:    txOpts,
		q:         buildQueries(d),
		held:      map[uuid.UUID]Lease{},
	}
	// Every vacated seat wakes the Electors waiting for it (handoff.go),
	// whether or not this Election runs any.
	e.registerHandoff()
	e.useStmtCache()
	return e, nil
}

// Namespace returns the namespace the Election is bound to.
func (e *Election) Namespace() string { return e.namespace }

// Expire returns the expiry window.
func (e *Election) Expire() time.Duration { return e.expire }

// queries are the statements of the protocol, built once per dialect.
type queries struct {
	upsertNow, upsertAt, insertLeader, keepLease, grant string
	vacate, vacateTerm, deleteCandidate                 string
	isLeader, list, expired, prune                      string
	selectLeader                                        map[dialect.Lock]string
}

// all lists every statement, for preparing them ahead.
func (q queries) all() []string {
	out := []string{q.upsertNow, q.upsertAt, q.insertLeader, q.keepLease, q.grant, q.vacate, q.vacateTerm,
		q.deleteCandidate, q.isLeader, q.list, q.expired, q.prune}
	for _, s := range q.selectLeader {
		out = append(out, s)
	}
	return out
}

func buildQueries(d dialect.Dialect) queries {
	now, plus := d.Now(), d.NowPlus()
	insertCandidate := "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) VALUES "
	q := queries{
		// One reading of the clock for all three times.
		upsertNow: "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) " +
			"SELECT ?, ?, t.n, t.n, " + d.Plus("t.n") + " FROM (SELECT " + now + " AS n) t WHERE 1 = 1 " + d.UpsertCandidate(),
		upsertAt:        insertCandidate + "(?, ?, ?, ?, ?) " + d.UpsertCandidate(),
		insertLeader:    "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 1, ?, ?, ?) " + d.InsertIgnore(),
		keepLease:       "UPDATE election_leaders SET lease_expires_at = ?, updated_at = ? WHERE namespace = ? AND leader_id = ? AND term = ?",
		grant:           "UPDATE election_leaders SET leader_id = ?, term = term + 1, lease_expires_at = ?, acquired_at = ?, updated_at = ? WHERE namespace = ? AND term = ?",
		vacate:          "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ?",
		vacateTerm:      "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ? AND term = ?",
		deleteCandidate: "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ?",
		isLeader:        "SELECT COUNT(*) FROM election_leaders WHERE namespace = ? AND leader_id = ? AND lease_expires_at > " + now,
		list:            "SELECT candidate_id FROM election_candidates WHERE namespace = ? AND expires_at > " + now + " ORDER BY candidate_id",
		expired:         "SELECT candidate_id FROM election_candidates WHERE namespace = ? AND expires_at < " + plus,
		prune:           "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ? AND expires_at < " + plus,
		selectLeader:    map[dialect.Lock]string{},
	}
	for _, s := range []*string{&q.upsertNow, &q.upsertAt, &q.insertLeader, &q.keepLease, &q.grant, &q.vacate, &q.vacateTerm,
		&q.deleteCandidate, &q.isLeader, &q.list, &q.expired, &q.prune} {
		*s = d.Rebind(*s)
	}
	for _, l := range []dialect.Lock{dialect.NoLock, dialect.ShareLock, dialect.UpdateLock} {
		q.selectLeader[l] = d.SelectLeader(l)
	}
	return q
}

// Retry policy for transient conflicts in transactions the library owns:
// at most maxAttempts attempts, waits from 2 ms doubling up to 250 ms, ±50%.
const maxAttempts = 12

var conflictBackoff = backoff{first: 2 * time.Millisecond, max: 250 * time.Millisecond, jitter: 0.5}

// callFunc is the body of a call. conn runs its statements; callerTx is
// true when conn is the caller's transaction (WithTx).
type callFunc func(conn gorm.ConnPool, callerTx bool) error

// scope says where a call runs when the caller passes no transaction.
type scope int

const (
	// scopeStatements runs the call's statements on the pool, each one
	// committing by itself: calls of one statement, or of statements that
	// need not commit together.
	scopeStatements scope = iota + 1
	// scopeTransaction runs the call in a transaction the library begins and
	// commits.
	scopeTransaction
)

// autocommit runs fn in the caller's transaction (WithTx), or else with
// each of its statements committing by itself.
func (e *Election) autocommit(ctx context.Context, op string, opts []CallOption, fn callFunc) error {
	return e.do(ctx, op, opts, scopeStatements, fn)
}

// transaction runs fn in the caller's transaction (WithTx), or else in a
// transaction of its own.
func (e *Election) transaction(ctx context.Context, op string, opts []CallOption, fn callFunc) error {
	return e.do(ctx, op, opts, scopeTransaction, fn)
}

// do runs fn once in the caller's transaction (WithTx), or in the given
// scope with bounded retries of transient conflicts. It turns errors into
// the package's sentinels.
func (e *Election) do(ctx context.Context, op string, opts []CallOption, sc scope, fn callFunc) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("election: %s: %w", op, err)
	}
	var cc callConfig
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil CallOption", ErrInvalidOption)
		}
		o.applyCall(&cc)
	}
	if cc.err != nil {
		return cc.err
	}
	if cc.tx != nil {
		if !gormx.InTransaction(cc.tx) {
			return fmt.Errorf("%w: WithTx needs a handle inside a transaction (from db.Begin, db.Transaction or session.FromTx)", ErrInvalidOption)
		}
		if cc.tx.Dialector == nil || cc.tx.Dialector.Name() != e.db.Dialector.Name() {
			return fmt.Errorf("%w: WithTx transaction is not on a %s database", ErrInvalidOption, e.d.Name())
		}
		return e.wrap(ctx, op, fn(gormx.Direct(cc.tx.Statement.ConnPool), true), true)
	}
	for attempt := 1; ; attempt++ {
		err := e.once(ctx, sc, fn)
		if err == nil {
			return nil
		}
		if e.d.Classify(err) != dialect.Transient || attempt == maxAttempts || ctx.Err() != nil {
			return e.wrap(ctx, op, err, false)
		}
		e.log.Debug("election: retrying after a transient conflict", "op", op, "attempt", attempt, "err", err)
		if !pause(ctx, conflictBackoff.wait(attempt)) {
			return e.wrap(ctx, op, err, false)
		}
	}
}

// once runs fn one time in scope sc.
func (e *Election) once(ctx context.Context, sc scope, fn callFunc) error {
	if sc == scopeStatements {
		return fn(e.conn(nil), false)
	}
	tx := e.db.WithContext(ctx).Begin(e.txOpts)
	if tx.Error != nil {
		return tx.Error
	}
	if err := fn(e.conn(tx.Statement.ConnPool), false); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit().Error
}

func (e *Election) wrap(ctx context.Context, op string, err error, callerTx bool) error {
	if err == nil {
		return nil
	}
	var known *callError
	if errors.As(err, &known) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("election: %s: %w: %w", op, cerr, err)
	}
	switch e.d.Classify(err) {
	case dialect.MissingTable:
		return fmt.Errorf("%w: %s: %w", ErrNotMigrated, op, err)
	case dialect.Transient:
		if callerTx {
			return fmt.Errorf("%w: %s in the caller's transaction (roll it back and retry): %w", ErrConflict, op, err)
		}
		return fmt.Errorf("%w: %s failed %d times: %w", ErrConflict, op, maxAttempts, err)
	}
	return fmt.Errorf("election: %s: %w", op, err)
}

// callError marks errors that are already in their final form.
type callError struct{ err error }

func (c *callError) Error() string { return c.err.Error() }
func (c *callError) Unwrap() error { return c.err }

func final(format string, args ...any) error { return &callError{fmt.Errorf(format, args...)} }

// seat is the leader row as read with the database clock.
type seat struct {
	now      time.Time
	exists   bool
	leader   uuid.UUID // uuid.Nil when vacant
	term     int64
	expires  time.Time
	acquired time.Time
}

func (s seat) live() bool { return s.leader != uuid.Nil && s.expires.After(s.now) }

func (e *Election) readSeat(ctx context.Context, conn gorm.ConnPool, lock dialect.Lock) (seat, error) {
	var (
		now, exp, acq dialect.Time
		leader        uuid.NullUUID
		term          sql.NullInt64
	)
	if err := conn.QueryRowContext(ctx, e.q.selectLeader[lock], e.namespace).Scan(&now, &leader, &term, &exp, &acq); err != nil {
		return seat{}, err
	}
	s := seat{now: now.Time, exists: term.Valid, term: term.Int64, expires: exp.Time, acquired: acq.Time}
	if leader.Valid && exp.Valid {
		s.leader = leader.UUID
	}
	return s, nil
}

// lease is the seat as the protocol reports it: vacant when expired.
func (e *Election) lease(s seat) Lease {
	if !s.live() {
		return Lease{Namespace: e.namespace}
	}
	return Lease{Namespace: e.namespace, Leader: s.leader, Term: s.term, ExpiresAt: s.expires, AcquiredAt: s.acquired}
}

func (e *Election) remember(id uuid.UUID, l Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.HeldBy(id) {
		e.held[id] = l
	} else {
		delete(e.held, id)
	}
}

func (e *Election) forget(id uuid.UUID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.held, id)
}

func (e *Election) cached(id uuid.UUID) (Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.held[id]
	return l, ok
}

// onVacate registers fn to run in the transaction that vacates the seat
// (UnregisterCandidate or Resign by the leader), e.g. to wake candidates.
// leader is the candidate that gave the seat up.
func (e *Election) onVacate(fn func(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.vacated = append(e.vacated, fn)
}

func (e *Election) runVacated(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error {
	e.mu.Lock()
	fns := append([]func(context.Context, gorm.ConnPool, uuid.UUID) error(nil), e.vacated...)
	e.mu.Unlock()
	for _, fn := range fns {
		if err := fn(ctx, conn, leader); err != nil {
			return err
		}
	}
	return nil
}
