//go:build !cgo

package session_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlelect/sqlelect/session"
)

// TestSQLiteWithoutCgo: in a program built without cgo, opening SQLite
// fails at once with an error that names cgo, for every SQLite DSN form.
func TestSQLiteWithoutCgo(t *testing.T) {
	for _, dsn := range []string{"sqlite::memory:", "sqlite:" + filepath.Join(t.TempDir(), "a.db"), "file:b.db", "c.sqlite3"} {
		db, err := session.Open(dsn)
		if err == nil {
			t.Fatalf("Open(%q) succeeded without cgo: %v", dsn, db)
		}
		if !strings.Contains(err.Error(), "cgo") || !strings.Contains(err.Error(), "CGO_ENABLED") {
			t.Errorf("Open(%q) = %v, want an error naming cgo", dsn, err)
		}
	}
}
