package migrate_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// states reads Status and fails the test on an error.
func states(t *testing.T, ctx context.Context, db *gorm.DB, opts ...migrate.Option) []migrate.State {
	t.Helper()
	st, err := migrate.Status(ctx, db, opts...)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// wantStates fails unless st lists every migration of database, in order,
// each applied or not as applied says.
func wantStates(t *testing.T, st []migrate.State, database string, applied bool) {
	t.Helper()
	ms, err := migrate.Migrations(database)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]migrate.State, len(ms))
	for i, m := range ms {
		want[i] = migrate.State{Migration: m, Applied: applied}
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Fatalf("Status (-want +got):\n%s", diff)
	}
}

// TestStatus: before Up every migration is pending, after it every one is
// applied; a record that cannot be read is an error, not "pending".
func TestStatus(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			wantStates(t, states(t, ctx, db), tg.Name, false)
			if err := migrate.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
			wantStates(t, states(t, ctx, db), tg.Name, true)

			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := migrate.Status(cctx, db); !errors.Is(err, context.Canceled) {
				t.Errorf("Status with a cancelled context: %v, want context.Canceled", err)
			}

			// A record that is there but cannot be read as versions.
			bad := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			if err := bad.Exec("CREATE TABLE " + migrate.VersionsTable + " (version VARCHAR(20) NOT NULL, name VARCHAR(20) NOT NULL)").Error; err != nil {
				t.Fatal(err)
			}
			if err := bad.Exec("INSERT INTO " + migrate.VersionsTable + " (version, name) VALUES ('one', 'x')").Error; err != nil {
				t.Fatal(err)
			}
			st, err := migrate.Status(ctx, bad)
			if err == nil || !strings.Contains(err.Error(), migrate.VersionsTable) {
				t.Fatalf("Status on an unreadable record: %v, %v; want an error naming %s", st, err, migrate.VersionsTable)
			}
			t.Logf("unreadable record: %v", err)

			if _, err := migrate.Status(ctx, nil); !errors.Is(err, migrate.ErrNoDatabase) {
				t.Errorf("Status(nil): %v, want ErrNoDatabase", err)
			}
			tx := db.Begin()
			defer tx.Rollback()
			if _, err := migrate.Status(ctx, tx); !errors.Is(err, migrate.ErrNoDatabase) {
				t.Errorf("Status in a transaction: %v, want ErrNoDatabase", err)
			}
			if tg.Name != "postgres" {
				if _, err := migrate.Status(ctx, db, migrate.WithSchema("app")); err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
					t.Errorf("Status(WithSchema) on %s: %v, want an error naming PostgreSQL", tg.Name, err)
				}
			}
		})
	}
}

// newSchema returns the name of a PostgreSQL schema no other test uses,
// dropped with its tables when the test ends; it does not create it.
func newSchema(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "sqlelect_s_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { db.Exec(`DROP SCHEMA IF EXISTS "` + name + `" CASCADE`) })
	return name
}

// TestStatusInSchema: Status reads the record of the schema WithSchema
// names: pending there until Up runs with the same schema, whatever the
// search path's tables say.
func TestStatusInSchema(t *testing.T) {
	tg := postgresTarget(t)
	ctx := testCtx(t)
	db := testdb.Open(t, tg) // migrated in the search path
	wantStates(t, states(t, ctx, db), "postgres", true)
	schema := newSchema(t, db)
	wantStates(t, states(t, ctx, db, migrate.WithSchema(schema)), "postgres", false)
	if err := migrate.Up(ctx, db, migrate.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	wantStates(t, states(t, ctx, db, migrate.WithSchema(schema)), "postgres", true)
}

// postgresTarget returns the configured PostgreSQL, skipping the test
// without one.
func postgresTarget(t *testing.T) testdb.Target {
	t.Helper()
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "postgres" {
			return tg
		}
	}
	t.Skipf("%s is not set", testdb.PostgresEnv)
	return testdb.Target{}
}

// TestPlainSQLInSchema: the shipped PostgreSQL files, applied by another
// tool as the package doc says (a DSN whose options set the search path to
// the schema, each file run whole), create tables that an Election with
// WithSchema uses: it elects, renews, guards a write and keeps history
// there, and nothing lands in the search path's own tables. Up with the
// same schema afterwards finds them and only records the versions.
func TestPlainSQLInSchema(t *testing.T) {
	tg := postgresTarget(t)
	if testdb.TransactionPooler() {
		t.Skip("a startup option is not passed to the server through a transaction pooler")
	}
	ctx := testCtx(t)
	db := testdb.Open(t, tg)
	schema := newSchema(t, db)
	if err := db.Exec(`CREATE SCHEMA "` + schema + `"`).Error; err != nil {
		t.Fatal(err)
	}

	// The migration tool's connection: pgx's database/sql driver, the
	// search path given in the DSN.
	u, err := url.Parse(tg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	tool, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()
	fsys, err := migrate.Files("postgres")
	if err != nil {
		t.Fatal(err)
	}
	ups, err := fs.Glob(fsys, "*.up.sql")
	if err != nil || len(ups) == 0 {
		t.Fatalf("the up files: %v, %v", ups, err)
	}
	for _, name := range ups { // in version order: fs.Glob sorts
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tool.ExecContext(ctx, string(body)); err != nil {
			t.Fatalf("applying %s with search_path=%s: %v", name, schema, err)
		}
	}
	for _, table := range []string{"election_candidates", "election_leaders", "election_history"} {
		var found sql.NullString
		if err := db.Raw("SELECT to_regclass(?)::text", `"`+schema+`".`+table).Scan(&found).Error; err != nil || !found.Valid {
			t.Fatalf("table %s in schema %s: %v, %v", table, schema, found, err)
		}
	}

	ns := testdb.Namespace(t)
	e, err := election.New(db, election.WithSchema(schema), election.WithNamespace(ns), election.WithExpire(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if err := e.RegisterCandidate(ctx, id); err != nil {
		t.Fatalf("RegisterCandidate: %v", err)
	}
	l, err := e.Elect(ctx, id)
	if err != nil || !l.HeldBy(id) || l.Term != 1 {
		t.Fatalf("Elect: %+v, %v; want term 1", l, err)
	}
	if r, err := e.Elect(ctx, id); err != nil || !r.HeldBy(id) || r.Term != 1 {
		t.Fatalf("renewal: %+v, %v; want term 1 kept", r, err)
	}
	if err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return e.Guard(ctx, l, election.WithTx(tx))
	}); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	if err := e.Resign(ctx, id); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	h, err := e.History(ctx, 10)
	if err != nil || len(h) != 1 || h[0].Term != 1 || h[0].EndReason == "" {
		t.Fatalf("History: %+v, %v; want term 1, ended", h, err)
	}
	var rows int64
	if err := db.Raw(`SELECT COUNT(*) FROM "`+schema+`".election_history WHERE namespace = ?`, ns).Scan(&rows).Error; err != nil || rows != 1 {
		t.Fatalf("the schema's history rows: %d, %v; want 1", rows, err)
	}
	plain, err := election.New(db, election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := plain.History(ctx, 10); err != nil || len(h) != 0 {
		t.Fatalf("the search path's history of the namespace: %+v, %v; want none", h, err)
	}

	wantStates(t, states(t, ctx, db, migrate.WithSchema(schema)), "postgres", false) // not recorded by the tool
	if err := migrate.Up(ctx, db, migrate.WithSchema(schema)); err != nil {
		t.Fatalf("Up over the tool's tables: %v", err)
	}
	wantStates(t, states(t, ctx, db, migrate.WithSchema(schema)), "postgres", true)
}
