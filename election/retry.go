package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/backoff"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/gormx"
)

// Retry policy for transient conflicts in transactions the library owns:
// at most maxAttempts attempts, waits from 2 ms doubling up to 250 ms, ±50%.
const maxAttempts = 12

var conflictBackoff = backoff.Backoff{First: 2 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.5}

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
	ctx = dialect.WithConnectTimeout(ctx, e.connectTimeout())
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
		if !backoff.Pause(ctx, conflictBackoff.Wait(attempt)) {
			return e.wrap(ctx, op, err, false)
		}
	}
}

// connectTimeout bounds each host's attempt when a call has to open a
// connection (PostgreSQL; a DSN's connect_timeout takes precedence): a tenth
// of the expiry window, between 1 s and 5 s. A failover to a host listed
// after one that hangs then costs a round that much, well inside the trust
// window.
func (e *Election) connectTimeout() time.Duration {
	return min(max(e.expire/10, time.Second), 5*time.Second)
}

// once runs fn one time in scope sc.
func (e *Election) once(ctx context.Context, sc scope, fn callFunc) error {
	if sc == scopeStatements {
		return fn(dialect.BoundConn(e.conn(nil), e.connectTimeout()), false)
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
	case dialect.ReadOnly:
		return fmt.Errorf("%w: %s: %w", ErrReadOnly, op, err)
	case dialect.Permission:
		return &deniedError{missing: e.d.Denied(err), err: fmt.Errorf("%w: %s: %w", ErrPermissionDenied, op, err)}
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
