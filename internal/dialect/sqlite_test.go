package dialect

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// bareSQLite is GORM's SQLite dialector without the query its Initialize
// runs (which mattn's stub fails without cgo): a handle that reports
// sqlite, as one opened some other way would. It runs no statement.
type bareSQLite struct{ gormsqlite.Dialector }

func (d bareSQLite) Initialize(db *gorm.DB) error {
	db.ConnPool = d.Conn
	return nil
}

// gormOn is a GORM handle on pool, through d.
func gormOn(t *testing.T, d gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestSQLiteAvailability: SQLite opens in every build, through
// mattn/go-sqlite3 with cgo and modernc.org/sqlite without, unless the DSN
// names a driver; a DSN that names mattn in a build without cgo, and a
// handle on mattn's stub, are refused with an error that says cgo is what
// is missing and what to use instead.
func TestSQLiteAvailability(t *testing.T) {
	if msg := ErrSQLiteNeedsCgo.Error(); !strings.Contains(msg, "cgo") || !strings.Contains(msg, "CGO_ENABLED=1") ||
		!strings.Contains(msg, "driver=modernc") {
		t.Errorf("ErrSQLiteNeedsCgo does not say how to fix it: %q", msg)
	}
	want := SQLiteModernc
	if cgoEnabled {
		want = SQLiteMattn
	}
	if sqliteDefault.Load() == nil {
		// (Unless SQLELECT_SQLITE_DRIVER chose the driver for the tests.)
		if got := DefaultSQLiteDriver(); got != want {
			t.Errorf("DefaultSQLiteDriver() = %q with cgo %v, want %q", got, cgoEnabled, want)
		}
	}
	for _, dsn := range []string{"sqlite::memory:", "sqlite::memory:?driver=modernc", "sqlite:" + filepath.Join(t.TempDir(), "a.db") + "?driver=modernc"} {
		if _, err := Open(dsn); err != nil {
			t.Errorf("Open(%s): %v", dsn, err)
		}
	}
	for _, dsn := range []string{"sqlite::memory:?driver=mattn", "sqlite:" + filepath.Join(t.TempDir(), "b.db") + "?driver=mattn"} {
		_, err := Open(dsn)
		if cgoEnabled && err != nil {
			t.Errorf("Open(%s) with cgo: %v", dsn, err)
		}
		if !cgoEnabled && !errors.Is(err, ErrSQLiteNeedsCgo) {
			t.Errorf("Open(%s) without cgo = %v, want ErrSQLiteNeedsCgo", dsn, err)
		}
	}
	pool, err := OpenSQLiteRaw("sqlite:" + filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := gormOn(t, sqlite{}.Gorm(pool))
	if _, err := (sqlite{}).Check(context.Background(), db); err != nil {
		t.Errorf("Check of a pool on the default driver (%s): %v", SQLiteDriverName(pool), err)
	}
	stub, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	d := sqlite{}.Gorm(stub)
	if !cgoEnabled {
		d = bareSQLite{gormsqlite.Dialector{Conn: stub}}
	}
	_, err = (sqlite{}).Check(context.Background(), gormOn(t, d))
	if cgoEnabled && err == nil {
		t.Errorf("Check of a plain mattn/go-sqlite3 pool (rollback journal) passed")
	}
	if !cgoEnabled && !errors.Is(err, ErrSQLiteNeedsCgo) {
		t.Errorf("Check of a mattn/go-sqlite3 pool without cgo = %v, want ErrSQLiteNeedsCgo", err)
	}
}

// TestNumberParams: the placeholders of a call of several statements are
// numbered in order, and a ? in quoted text is left alone.
func TestNumberParams(t *testing.T) {
	for q, want := range map[string]string{
		"SELECT 1": "SELECT 1",
		"INSERT INTO t VALUES (?); INSERT INTO t VALUES (?, ?)": "INSERT INTO t VALUES (?1); INSERT INTO t VALUES (?2, ?3)",
		"SELECT '?', \"a?\", ?":                                 "SELECT '?', \"a?\", ?1",
		"SELECT 'it''s ?', ?":                                   "SELECT 'it''s ?', ?1",
	} {
		if got := numberParams(q); got != want {
			t.Errorf("numberParams(%q) = %q, want %q", q, got, want)
		}
	}
}
