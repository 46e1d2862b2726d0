// Package stmtcache keeps statements prepared on a pool for every Election
// that uses it. SQLite compiles a statement on every call that is not
// prepared, and for the short statements of the protocol compiling costs
// more than running them. database/sql prepares each statement once per
// connection, re-prepares it on new connections, and closes the driver's
// statements with the pool.
//
// One Cache serves every user of a pool (Shared), so that a new one finds
// the statements the pool has run prepared already. Each statement is
// prepared the first time it runs outside a transaction; the cache closes
// its statements when its last user releases it.
package stmtcache

import (
	"context"
	"database/sql"
	"sync"
)

// Cache is the prepared statements of one pool.
type Cache struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
	refs  int // the users of the cache; guarded by pools
}

// pools is the cache of each pool in use.
var pools = struct {
	sync.Mutex
	m map[*sql.DB]*Cache
}{m: map[*sql.DB]*Cache{}}

// Shared returns db's cache, counting one more user of it.
func Shared(db *sql.DB) *Cache {
	pools.Lock()
	defer pools.Unlock()
	c := pools.m[db]
	if c == nil {
		c = &Cache{db: db, stmts: map[string]*sql.Stmt{}}
		pools.m[db] = c
	}
	c.refs++
	return c
}

// Release counts one user less of c; the last closes the statements.
func (c *Cache) Release() {
	pools.Lock()
	c.refs--
	last := c.refs == 0
	if last && pools.m[c.db] == c {
		delete(pools.m, c.db)
	}
	pools.Unlock()
	if last {
		c.close()
	}
}

// Len is the number of statements prepared.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.stmts)
}

// get returns the statement for query, preparing it on the pool if prepare
// is set (nil if it is not cached and may not be prepared). Inside a
// transaction it must not be: preparing on the pool needs a second
// connection, which a pool of one would never give.
func (c *Cache) get(ctx context.Context, query string, prepare bool) (*sql.Stmt, error) {
	c.mu.Lock()
	s, ok := c.stmts[query]
	c.mu.Unlock()
	if ok || !prepare {
		return s, nil
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

func (c *Cache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, s := range c.stmts {
		s.Close()
		delete(c.stmts, q)
	}
}

// Conn returns a connection that runs statements through c: on the pool
// or, when tx is not nil, in tx, a transaction begun on that pool. A
// statement that cannot be prepared (a missing table, a cancelled context)
// runs unprepared, so that its error comes back the usual way. Conn has
// the methods of gorm.ConnPool.
func (c *Cache) Conn(tx *sql.Tx) Conn { return Conn{c: c, tx: tx} }

// Conn is a connection through a Cache.
type Conn struct {
	c  *Cache
	tx *sql.Tx
}

type plainConn interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (cc Conn) plain() plainConn {
	if cc.tx != nil {
		return cc.tx
	}
	return cc.c.db
}

func (cc Conn) stmt(ctx context.Context, query string) *sql.Stmt {
	s, err := cc.c.get(ctx, query, cc.tx == nil)
	if err != nil || s == nil {
		return nil
	}
	if cc.tx != nil {
		return cc.tx.StmtContext(ctx, s)
	}
	return s
}

// PrepareContext prepares query on the connection, outside the cache.
func (cc Conn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return cc.plain().PrepareContext(ctx, query)
}

// ExecContext runs query through its prepared statement.
func (cc Conn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := cc.stmt(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return cc.plain().ExecContext(ctx, query, args...)
}

// QueryContext runs query through its prepared statement.
func (cc Conn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := cc.stmt(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return cc.plain().QueryContext(ctx, query, args...)
}

// QueryRowContext runs query through its prepared statement.
func (cc Conn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := cc.stmt(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return cc.plain().QueryRowContext(ctx, query, args...)
}
