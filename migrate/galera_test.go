package migrate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// TestGaleraConcurrentUp: migrate.Up called at the same moment through
// every node of a Galera cluster, on an empty database, succeeds everywhere
// and applies each version once. GET_LOCK is each node's own there, so the
// calls really do race; the one that loses a step waits for the other to
// record the version.
func TestGaleraConcurrentUp(t *testing.T) {
	dsns := testdb.Galera(t)
	first := testdb.OpenDSN(t, dsns[0]).Session(&gorm.Session{Logger: logger.Discard})
	ms, err := migrate.Migrations("mysql")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := "galera_up_" + hex.EncodeToString(b[:])
		if err := first.Exec("CREATE DATABASE " + name).Error; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { first.Exec("DROP DATABASE IF EXISTS " + name) })
		dbs := make([]*gorm.DB, len(dsns))
		for i, dsn := range dsns {
			if !strings.HasSuffix(dsn, "/test") {
				t.Fatalf("node DSN %q does not end in /test", dsn)
			}
			dbs[i] = testdb.OpenDSN(t, strings.TrimSuffix(dsn, "/test")+"/"+name).Session(&gorm.Session{Logger: logger.Discard})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		errs := make([]error, len(dbs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = migrate.Up(ctx, db)
			}()
		}
		close(start)
		wg.Wait()
		cancel()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: migrate.Up through node %d: %v", round, i+1, err)
			}
		}
		for i, db := range dbs {
			var rows, versions int64
			db.Exec("SET SESSION wsrep_sync_wait = 1")
			if err := db.Raw("SELECT COUNT(*), COUNT(DISTINCT version) FROM "+migrate.VersionsTable).Row().Scan(&rows, &versions); err != nil {
				t.Fatalf("round %d: node %d: %v", round, i+1, err)
			}
			if rows != int64(len(ms)) || versions != int64(len(ms)) {
				t.Errorf("round %d: node %d records %d rows for %d versions, want %d of each", round, i+1, rows, versions, len(ms))
			}
			// The newest version's columns are there.
			if err := db.Exec("SELECT hostname, pid, label FROM election_candidates LIMIT 1").Error; err != nil {
				t.Errorf("round %d: node %d: %v", round, i+1, err)
			}
		}
	}
}
