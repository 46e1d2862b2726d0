//go:build !cgo

package session_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlelect/sqlelect/session"
)

// TestSQLiteWithoutCgo: in a program built without cgo, every SQLite DSN
// form opens (through modernc.org/sqlite) a database that runs elections,
// and one that asks for mattn/go-sqlite3 fails at once with an error that
// names cgo and the way out.
func TestSQLiteWithoutCgo(t *testing.T) {
	dir := t.TempDir()
	for _, dsn := range []string{"sqlite::memory:", "sqlite:" + filepath.Join(dir, "a.db"), "file:" + filepath.Join(dir, "b.db"),
		filepath.Join(dir, "c.sqlite3"), "sqlite:" + filepath.Join(dir, "d.db") + "?driver=modernc&_busy_timeout=2000"} {
		t.Run(dsn, func(t *testing.T) {
			db := open(t, dsn)
			works(t, db, "sqlite")
		})
	}
	for _, dsn := range []string{"sqlite::memory:?driver=mattn", "sqlite:" + filepath.Join(dir, "e.db") + "?driver=mattn"} {
		db, err := session.Open(dsn)
		if err == nil {
			t.Fatalf("Open(%q) succeeded without cgo: %v", dsn, db)
		}
		if !strings.Contains(err.Error(), "CGO_ENABLED") || !strings.Contains(err.Error(), "driver=modernc") {
			t.Errorf("Open(%q) = %v, want an error naming cgo and driver=modernc", dsn, err)
		}
	}
}
