package migrate_test

import (
	"context"
	"errors"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// TestMain fails the package on leaked goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var tables = []string{"election_candidates", "election_leaders", migrate.VersionsTable}

// wantTables fails unless every table exists (or, with exist false, none does).
func wantTables(t *testing.T, db *gorm.DB, exist bool) {
	t.Helper()
	for _, table := range tables {
		if got := db.Migrator().HasTable(table); got != exist {
			t.Fatalf("table %s exists: %v, want %v", table, got, exist)
		}
	}
}

// appliedVersions reads the record of applied versions.
func appliedVersions(t *testing.T, db *gorm.DB) []int64 {
	t.Helper()
	var vs []int64
	if err := db.Raw("SELECT version FROM " + migrate.VersionsTable + " ORDER BY version").Scan(&vs).Error; err != nil {
		t.Fatalf("reading %s: %v", migrate.VersionsTable, err)
	}
	return vs
}

func allVersions(t *testing.T, database string) []int64 {
	t.Helper()
	ms, err := migrate.Migrations(database)
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, m := range ms {
		vs = append(vs, m.Version)
	}
	return vs
}

// electOnce shows the schema works: a first Elect wins term 1.
func electOnce(t *testing.T, db *gorm.DB) {
	t.Helper()
	e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)))
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	id := uuid.New()
	l, err := e.Elect(testCtx(t), id)
	if err != nil {
		t.Fatalf("Elect: %v", err)
	}
	if l.Leader != id || l.Term != 1 {
		t.Fatalf("Elect on the new schema: %+v", l)
	}
}

// TestUpIdempotent: Up on an empty database creates the schema and records
// every version once; running it again changes nothing.
func TestUpIdempotent(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			wantTables(t, db, false)
			for i := 0; i < 3; i++ {
				if err := migrate.Up(ctx, db); err != nil {
					t.Fatalf("Up #%d: %v", i+1, err)
				}
			}
			wantTables(t, db, true)
			if got, want := appliedVersions(t, db), allVersions(t, tg.Name); !cmp.Equal(got, want) {
				t.Fatalf("applied versions %v, want %v", got, want)
			}
			electOnce(t, db)
		})
	}
}

// TestUpConcurrent: several handles (own pools, as separate processes would
// have) run Up at the same moment on an empty database; all succeed and
// each version is applied once.
func TestUpConcurrent(t *testing.T) {
	const n = 5
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn := testdb.Fresh(t, tg)
			dbs := make([]*gorm.DB, n)
			for i := range dbs {
				dbs[i] = testdb.OpenDSN(t, dsn)
			}
			start := make(chan struct{})
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range dbs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = migrate.Up(ctx, dbs[i])
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("Up #%d: %v", i, err)
				}
			}
			if t.Failed() {
				return
			}
			wantTables(t, dbs[0], true)
			if got, want := appliedVersions(t, dbs[0]), allVersions(t, tg.Name); !cmp.Equal(got, want) {
				t.Fatalf("applied versions %v, want %v", got, want)
			}
			electOnce(t, dbs[n-1])
		})
	}
}

// TestDownThenUp: Down removes the schema and its record; Up brings both
// back.
func TestDownThenUp(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			if err := migrate.Up(ctx, db); err != nil {
				t.Fatalf("Up: %v", err)
			}
			electOnce(t, db)
			if err := migrate.Down(ctx, db); err != nil {
				t.Fatalf("Down: %v", err)
			}
			wantTables(t, db, false)
			if err := migrate.Down(ctx, db); err != nil {
				t.Fatalf("Down on an empty database: %v", err)
			}
			if err := migrate.Up(ctx, db); err != nil {
				t.Fatalf("Up after Down: %v", err)
			}
			wantTables(t, db, true)
			if got, want := appliedVersions(t, db), allVersions(t, tg.Name); !cmp.Equal(got, want) {
				t.Fatalf("applied versions %v, want %v", got, want)
			}
			electOnce(t, db)
		})
	}
}

// TestUpRefusesNonDatabases: nil and transaction handles are refused.
func TestUpRefusesNonDatabases(t *testing.T) {
	ctx := testCtx(t)
	if err := migrate.Up(ctx, nil); !errors.Is(err, migrate.ErrNoDatabase) {
		t.Fatalf("Up(nil): %v, want ErrNoDatabase", err)
	}
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	tx := db.Begin()
	defer tx.Rollback()
	if err := migrate.Up(ctx, tx); !errors.Is(err, migrate.ErrNoDatabase) {
		t.Fatalf("Up(transaction): %v, want ErrNoDatabase", err)
	}
}

// TestFiles: the embedded SQL of each database, in golang-migrate's naming.
func TestFiles(t *testing.T) {
	name := regexp.MustCompile(`^\d{4}_[a-z0-9_]+\.(up|down)\.sql$`)
	for _, database := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(database, func(t *testing.T) {
			fsys, err := migrate.Files(database)
			if err != nil {
				t.Fatal(err)
			}
			entries, err := fs.ReadDir(fsys, ".")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
				if !name.MatchString(e.Name()) {
					t.Errorf("file %s does not follow NNNN_name.up.sql / .down.sql", e.Name())
				}
				body, err := fs.ReadFile(fsys, e.Name())
				if err != nil || len(strings.TrimSpace(string(body))) == 0 {
					t.Errorf("file %s is empty or unreadable: %v", e.Name(), err)
				}
			}
			sort.Strings(names)
			want := []string{"0001_election_tables.down.sql", "0001_election_tables.up.sql"}
			for _, w := range want {
				if i := sort.SearchStrings(names, w); i == len(names) || names[i] != w {
					t.Errorf("files %v lack %s", names, w)
				}
			}
			ms, err := migrate.Migrations(database)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 || len(ms)*2 != len(names) {
				t.Fatalf("%d migrations from %d files", len(ms), len(names))
			}
			for _, m := range ms {
				if len(m.Up) == 0 || len(m.Down) == 0 {
					t.Errorf("migration %d has %d up and %d down statements", m.Version, len(m.Up), len(m.Down))
				}
			}
		})
	}
	if _, err := migrate.Files("oracle"); err == nil {
		t.Fatal("Files of an unknown database: no error")
	}
}

// TestSchemaTypes: native uuid on PostgreSQL, microsecond timestamps on
// every database.
func TestSchemaTypes(t *testing.T) {
	timeCols := map[string][]string{
		"election_candidates": {"registered_at", "last_heartbeat_at", "expires_at"},
		"election_leaders":    {"lease_expires_at", "acquired_at", "updated_at"},
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			switch tg.Name {
			case "postgres":
				for table, cols := range map[string][]string{"election_candidates": {"candidate_id"}, "election_leaders": {"leader_id"}} {
					for _, col := range cols {
						if got := pgColumn(t, db, table, col, "data_type"); got != "uuid" {
							t.Errorf("%s.%s is %s, want uuid", table, col, got)
						}
					}
				}
				for table, cols := range timeCols {
					for _, col := range cols {
						if got := pgColumn(t, db, table, col, "data_type"); got != "timestamp with time zone" {
							t.Errorf("%s.%s is %s, want timestamp with time zone", table, col, got)
						}
						if got := pgColumn(t, db, table, col, "datetime_precision"); got != "6" {
							t.Errorf("%s.%s has precision %s, want 6", table, col, got)
						}
					}
				}
			case "mysql":
				for table, cols := range timeCols {
					for _, col := range cols {
						var typ string
						var prec int
						err := db.Raw("SELECT data_type, datetime_precision FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", table, col).Row().Scan(&typ, &prec)
						if err != nil {
							t.Fatalf("%s.%s: %v", table, col, err)
						}
						if typ != "datetime" || prec != 6 {
							t.Errorf("%s.%s is %s(%d), want datetime(6)", table, col, typ, prec)
						}
					}
				}
			case "sqlite":
				// SQLite has no column precision: the library stores
				// fixed-width text with six fractional digits.
				for table, cols := range timeCols {
					var infos []struct {
						Name string
						Type string
					}
					if err := db.Raw("SELECT name, type FROM pragma_table_info(?)", table).Scan(&infos).Error; err != nil {
						t.Fatal(err)
					}
					got := map[string]string{}
					for _, in := range infos {
						got[in.Name] = in.Type
					}
					for _, col := range cols {
						if got[col] != "DATETIME" {
							t.Errorf("%s.%s is %q, want DATETIME", table, col, got[col])
						}
					}
				}
			}
			// Stored values keep microseconds (SQLite: six digits of text).
			ns := testdb.Namespace(t)
			e, err := election.New(db, election.WithNamespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Elect(testCtx(t), uuid.New()); err != nil {
				t.Fatal(err)
			}
			if tg.Name == "sqlite" {
				var text []string
				if err := db.Raw("SELECT CAST(lease_expires_at AS TEXT) FROM election_leaders WHERE namespace = ? UNION ALL SELECT CAST(expires_at AS TEXT) FROM election_candidates WHERE namespace = ?", ns, ns).Scan(&text).Error; err != nil {
					t.Fatal(err)
				}
				six := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$`)
				for _, s := range text {
					if !six.MatchString(s) {
						t.Errorf("stored timestamp %q is not UTC text with six fractional digits", s)
					}
				}
			}
		})
	}
}

func pgColumn(t *testing.T, db *gorm.DB, table, col, attr string) string {
	t.Helper()
	var v *string
	err := db.Raw("SELECT CAST("+attr+" AS text) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?", table, col).Row().Scan(&v)
	if err != nil {
		t.Fatalf("%s.%s: %v", table, col, err)
	}
	if v == nil {
		return ""
	}
	return *v
}

// Down refuses a transaction handle, like Up.
func TestDownRefusesTransaction(t *testing.T) {
	db, err := session.Open("sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer testdb.Close(db)
	tx := db.Begin()
	defer tx.Rollback()
	if err := migrate.Down(testCtx(t), tx); !errors.Is(err, migrate.ErrNoDatabase) {
		t.Fatalf("Down(transaction): %v, want ErrNoDatabase", err)
	}
}
