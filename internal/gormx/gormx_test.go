package gormx_test

import (
	"context"
	"database/sql"
	"testing"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/gormx"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestInTransaction tells handles in transactions from the others, typed
// nil transactions included.
func TestInTransaction(t *testing.T) {
	db := testdb.OpenDSN(t, "sqlite::memory:")
	if gormx.InTransaction(nil) || gormx.InTransaction(&gorm.DB{}) || gormx.InTransaction(db) {
		t.Fatal("a handle outside a transaction is reported in one")
	}
	tx := db.Begin()
	defer tx.Rollback()
	if !gormx.InTransaction(tx) {
		t.Fatal("db.Begin() is not reported in a transaction")
	}
	// With a Context the session's Statement is a copy: db keeps its pool.
	typedNil := db.Session(&gorm.Session{NewDB: true, Context: context.Background()})
	typedNil.Statement.ConnPool = (*sql.Tx)(nil)
	if gormx.InTransaction(typedNil) {
		t.Fatal("a nil *sql.Tx is reported as a transaction")
	}
}

// TestQuiet: the quiet session leaves the caller's handle alone and skips
// the prepared-statement cache.
func TestQuiet(t *testing.T) {
	db := testdb.OpenDSN(t, "sqlite::memory:").Session(&gorm.Session{PrepareStmt: true})
	before := db.Statement.ConnPool
	q := gormx.Quiet(db)
	if db.Statement.ConnPool != before {
		t.Fatal("Quiet changed the caller's handle")
	}
	if _, ok := q.Statement.ConnPool.(*gorm.PreparedStmtDB); ok {
		t.Fatal("the quiet session still goes through the prepared-statement cache")
	}
	var n int
	if err := q.Raw("SELECT 1").Row().Scan(&n); err != nil || n != 1 {
		t.Fatalf("SELECT 1 = %d, %v", n, err)
	}
}
