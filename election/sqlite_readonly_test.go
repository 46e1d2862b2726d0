package election_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// TestSQLiteReadOnlyFile: on either SQLite driver, a call that must write
// to a database the process may only read (here opened with mode=ro)
// fails with ErrReadOnly, as on a read-only server, and changes nothing;
// reads still work.
func TestSQLiteReadOnlyFile(t *testing.T) {
	for _, tg := range testdb.SQLiteDrivers() {
		t.Run(tg.Driver, func(t *testing.T) {
			ctx := testCtx(t)
			path := filepath.Join(t.TempDir(), "ro.db")
			rw := testdb.OpenDSN(t, tg.SQLiteDSN(path))
			must(t, "migrate.Up", migrate.Up(ctx, rw))
			leader := uuid.New()
			held := mustElect(t, mustElection(t, rw, "ro"), leader)

			ro := testdb.OpenDSN(t, tg.SQLiteDSN(path)+"&mode=ro")
			e := mustElection(t, ro, "ro")
			if _, err := e.Elect(ctx, uuid.New()); !errors.Is(err, election.ErrReadOnly) {
				t.Fatalf("Elect on a read-only file: %v, want ErrReadOnly", err)
			}
			if err := e.RegisterCandidate(ctx, uuid.New()); !errors.Is(err, election.ErrReadOnly) {
				t.Fatalf("RegisterCandidate on a read-only file: %v, want ErrReadOnly", err)
			}
			if got := mustLeader(t, e); got.Leader != leader || got.Term != held.Term {
				t.Fatalf("Leader through the read-only handle: %+v, want %+v", got, held)
			}
		})
	}
}
