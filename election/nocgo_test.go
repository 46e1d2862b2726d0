//go:build !cgo

package election_test

import (
	"database/sql"
	"strings"
	"testing"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
)

// stubSQLite is GORM's SQLite dialector without the query its Initialize
// runs, which the driver's stub fails: a handle that reports sqlite, as one
// opened some other way would.
type stubSQLite struct{ gormsqlite.Dialector }

func (d stubSQLite) Initialize(db *gorm.DB) error {
	db.ConnPool = d.Conn
	return nil
}

// TestNewSQLiteWithoutCgo: in a program built without cgo, New on a SQLite
// handle fails with an error that names cgo.
func TestNewSQLiteWithoutCgo(t *testing.T) {
	pool, err := sql.Open("sqlite3", "file:nocgo.db")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := gorm.Open(stubSQLite{gormsqlite.Dialector{Conn: pool}}, &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := db.Dialector.Name(); got != "sqlite" {
		t.Fatalf("dialector name %q", got)
	}
	e, err := election.New(db)
	if err == nil {
		t.Fatalf("New succeeded without cgo: %v", e)
	}
	if !strings.Contains(err.Error(), "cgo") || !strings.Contains(err.Error(), "CGO_ENABLED") {
		t.Errorf("New = %v, want an error naming cgo", err)
	}
}
