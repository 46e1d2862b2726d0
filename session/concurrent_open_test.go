package session_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/sqlelect/sqlelect/session"
)

// TestConcurrentOpenSQLite: pools opening the same new SQLite file at once
// all succeed. The first connection of each switches the file to WAL, which
// needs a lock the busy timeout does not wait for; Open retries the
// "database is locked" that the others get meanwhile.
func TestConcurrentOpenSQLite(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "new.db")
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db, err := session.Open("sqlite:" + path)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				if sqlDB, err := db.DB(); err == nil {
					sqlDB.Close()
				}
			}()
		}
		wg.Wait()
	}
}
