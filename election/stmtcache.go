package election

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"sync"

	"gorm.io/gorm"
)

// stmtCache keeps the Elections' statements prepared on their pool. SQLite
// compiles a statement on every call that is not prepared, and for the
// short statements of the protocol compiling costs more than running them.
// database/sql prepares each statement once per connection, re-prepares it
// on new connections, and closes the driver's statements with the pool.
//
// One cache serves every Election on a pool (poolStmts), so that a new
// Election, an Elector's first round, finds the statements the pool has
// run prepared already. Each statement is prepared the first time it runs
// outside a transaction; the cache closes its statements when the last
// Election using it is garbage.
type stmtCache struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
	refs  int // the Elections using the cache; guarded by poolStmts
}

// poolStmts is the cache of each pool that Elections use.
var poolStmts = struct {
	sync.Mutex
	m map[*sql.DB]*stmtCache
}{m: map[*sql.DB]*stmtCache{}}

// sharedStmtCache returns db's cache, counting one more Election using it.
func sharedStmtCache(db *sql.DB) *stmtCache {
	poolStmts.Lock()
	defer poolStmts.Unlock()
	c := poolStmts.m[db]
	if c == nil {
		c = &stmtCache{db: db, stmts: map[string]*sql.Stmt{}}
		poolStmts.m[db] = c
	}
	c.refs++
	return c
}

// release counts one Election less using c; the last closes the
// statements.
func (c *stmtCache) release() {
	poolStmts.Lock()
	c.refs--
	last := c.refs == 0
	if last && poolStmts.m[c.db] == c {
		delete(poolStmts.m, c.db)
	}
	poolStmts.Unlock()
	if last {
		c.close()
	}
}

// get returns the statement for query, preparing it on the pool if prepare
// is set. Inside a transaction it must not be: preparing on the pool needs a
// second connection, which a pool of one would never give.
func (c *stmtCache) get(ctx context.Context, query string, prepare bool) (*sql.Stmt, error) {
	c.mu.Lock()
	s, ok := c.stmts[query]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	if !prepare {
		return nil, errNotCached
	}
	// Prepare without the lock: preparing waits for a connection, which
	// on a small pool another goroutine's transaction may hold while it
	// needs the cache.
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.stmts[query]; ok {
		s.Close()
		return prev, nil
	}
	c.stmts[query] = s
	return s, nil
}

var errNotCached = errors.New("statement not cached")

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, s := range c.stmts {
		s.Close()
		delete(c.stmts, q)
	}
}

// cachedConn runs statements through the cache, on the pool or, when tx is
// set, in a transaction the library began on that pool. A statement that
// cannot be prepared (a missing table, a cancelled context) runs unprepared,
// so that its error comes back the usual way.
type cachedConn struct {
	c  *stmtCache
	tx *sql.Tx
}

var _ gorm.ConnPool = cachedConn{}

func (cc cachedConn) plain() gorm.ConnPool {
	if cc.tx != nil {
		return cc.tx
	}
	return cc.c.db
}

func (cc cachedConn) stmt(ctx context.Context, query string) *sql.Stmt {
	s, err := cc.c.get(ctx, query, cc.tx == nil)
	if err != nil {
		return nil
	}
	if cc.tx != nil {
		return cc.tx.StmtContext(ctx, s)
	}
	return s
}

func (cc cachedConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return cc.plain().PrepareContext(ctx, query)
}

func (cc cachedConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := cc.stmt(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return cc.plain().ExecContext(ctx, query, args...)
}

func (cc cachedConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := cc.stmt(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return cc.plain().QueryContext(ctx, query, args...)
}

func (cc cachedConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := cc.stmt(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return cc.plain().QueryRowContext(ctx, query, args...)
}

// useStmtCache routes the Election's own statements through its pool's
// cache when its dialect gains from it and its pool is a *sql.DB. The
// Election stops using the cache when it is garbage.
func (e *Election) useStmtCache() {
	db, ok := e.db.Statement.ConnPool.(*sql.DB)
	if !ok || !e.d.CacheStatements() {
		return
	}
	e.stmts = sharedStmtCache(db)
	runtime.SetFinalizer(e, func(e *Election) { e.stmts.release() })
}

// conn returns the connection for a call outside the caller's transaction:
// the pool, or tx when the library began one.
func (e *Election) conn(tx gorm.ConnPool) gorm.ConnPool {
	if e.stmts == nil {
		if tx != nil {
			return tx
		}
		return e.db.Statement.ConnPool
	}
	if tx == nil {
		return cachedConn{c: e.stmts}
	}
	if sqlTx, ok := tx.(*sql.Tx); ok {
		return cachedConn{c: e.stmts, tx: sqlTx}
	}
	return tx
}
