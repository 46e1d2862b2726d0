// Package gormx holds what the library needs to know about GORM handles:
// whether a handle is in a transaction, how to reach the connection under
// GORM's prepared-statement cache, and a quiet session of a handle that
// leaves the caller's handle as it was.
package gormx

import (
	"context"
	"database/sql"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// InTransaction reports whether db runs its statements in a transaction.
func InTransaction(db *gorm.DB) bool {
	if db == nil || db.Statement == nil {
		return false
	}
	c, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	if !ok {
		return false
	}
	// A nil pointer in a non-nil interface is not a transaction.
	switch t := c.(type) {
	case *sql.Tx:
		return t != nil
	case *gorm.PreparedStmtTX:
		return t != nil && t.Tx != nil
	}
	return c != nil
}

// Direct returns conn without GORM's prepared-statement cache (a handle
// opened with gorm.Config{PrepareStmt: true}): the cache answers a failed
// prepare (a missing table, an unknown variable, a cancelled context) from
// QueryRowContext with an empty *sql.Row whose Scan panics, where the pool
// or transaction underneath returns the error.
func Direct(conn gorm.ConnPool) gorm.ConnPool {
	switch p := conn.(type) {
	case *gorm.PreparedStmtDB:
		if p != nil && p.ConnPool != nil {
			return p.ConnPool
		}
	case *gorm.PreparedStmtTX:
		if p != nil && p.Tx != nil {
			return p.Tx
		}
	}
	return conn
}

// Quiet returns a new session of db that logs nothing and whose statements
// skip GORM's prepared-statement cache (see Direct). The caller's db and
// its Config stay as they were. It is for the library's own statements:
// settings probes that may fail on purpose (a variable one server version
// lacks), and protocol statements that are not the application's queries.
func Quiet(db *gorm.DB) *gorm.DB {
	// With a Context the session's Statement is a copy, so setting its
	// ConnPool changes only the new session.
	s := db.Session(&gorm.Session{NewDB: true, Logger: logger.Discard, Context: context.Background()})
	s.Statement.ConnPool = Direct(s.Statement.ConnPool)
	return s
}
