package migrate_test

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// childDSNEnv carries the DSN to a child process of TestUpProcesses.
const childDSNEnv = "SQLELECT_MIGRATE_CHILD_DSN"

// TestUpProcesses: several processes run Up at the same moment on an empty
// database (through a pooler, too, when the configured DSN points at one);
// all succeed and each version is applied once.
func TestUpProcesses(t *testing.T) {
	const n = 6
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn := testdb.Fresh(t, tg)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			outs := make([][]byte, n)
			errs := make([]error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestUpChild$", "-test.count=1")
					cmd.Env = append(os.Environ(), childDSNEnv+"="+dsn)
					outs[i], errs[i] = cmd.CombinedOutput()
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("process %d: %v\n%s", i, err, outs[i])
				}
			}
			if t.Failed() {
				return
			}
			db := testdb.OpenDSN(t, dsn)
			wantTables(t, db, true)
			if got, want := appliedVersions(t, db), allVersions(t, tg.Name); !cmp.Equal(got, want) {
				t.Fatalf("applied versions %v, want %v", got, want)
			}
			electOnce(t, db)
		})
	}
}

// TestUpChild is one process of TestUpProcesses; it does nothing otherwise.
func TestUpChild(t *testing.T) {
	dsn := os.Getenv(childDSNEnv)
	if dsn == "" {
		t.Skip("run by TestUpProcesses")
	}
	db, err := session.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer testdb.Close(db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
}
