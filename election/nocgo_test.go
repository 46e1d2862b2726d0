//go:build !cgo

package election_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
)

// stubSQLite is GORM's SQLite dialector without the query its Initialize
// runs, which the driver's stub fails: a handle that reports sqlite, as one
// opened some other way would.
type stubSQLite struct{ gormsqlite.Dialector }

func (d stubSQLite) Initialize(db *gorm.DB) error {
	db.ConnPool = d.Conn
	return nil
}

// TestNewSQLiteWithoutCgo: in a program built without cgo, New on a handle
// on mattn/go-sqlite3 (only a stub there) fails with an error that names
// cgo.
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

// TestNewModerncWithoutCgo: in a program built without cgo, a handle the
// application opened itself on modernc.org/sqlite, through GORM's SQLite
// dialector, passes New's check when it has WAL and a busy timeout, is
// refused naming the parameter otherwise, and runs elections.
func TestNewModerncWithoutCgo(t *testing.T) {
	dir := t.TempDir()
	plain := func(dsn string) *gorm.DB {
		db, err := gorm.Open(gormsqlite.Dialector{DriverName: "sqlite", DSN: dsn}, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeGorm(db) })
		return db
	}
	_, err := election.New(plain(filepath.Join(dir, "nobusy.db") + "?_pragma=journal_mode(WAL)"))
	wantUnsafe(t, err, "_pragma=busy_timeout(5000)")
	db := plain(filepath.Join(dir, "ok.db") + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	ctx := testCtx(t)
	must(t, "migrate.Up", migrate.Up(ctx, db))
	e := mustElection(t, db, "nocgo")
	id := uuid.New()
	if l := mustElect(t, e, id); l.Leader != id {
		t.Fatalf("Elect: %+v", l)
	}
}

func closeGorm(db *gorm.DB) {
	if pool, err := db.DB(); err == nil {
		pool.Close()
	}
}
