package election

import (
	"database/sql"
	"runtime"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/stmtcache"
)

var _ gorm.ConnPool = stmtcache.Conn{}

// useStmtCache routes the Election's own statements through its pool's
// cache of prepared statements (internal/stmtcache) when its dialect gains
// from it and its pool is a *sql.DB. The Election stops using the cache
// when it is garbage.
func (e *Election) useStmtCache() {
	db, ok := e.db.Statement.ConnPool.(*sql.DB)
	if !ok || !e.d.CacheStatements() {
		return
	}
	e.stmts = stmtcache.Shared(db)
	runtime.SetFinalizer(e, func(e *Election) { e.stmts.Release() })
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
		return e.stmts.Conn(nil)
	}
	if sqlTx, ok := tx.(*sql.Tx); ok {
		return e.stmts.Conn(sqlTx)
	}
	return tx
}
