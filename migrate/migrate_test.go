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

var tables = []string{"election_candidates", "election_leaders", "election_history", migrate.VersionsTable}

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
			want := []string{"0001_election_tables.down.sql", "0001_election_tables.up.sql",
				"0002_identity_history.down.sql", "0002_identity_history.up.sql"}
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
		"election_history":    {"acquired_at", "ended_at"},
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			switch tg.Name {
			case "postgres":
				for table, cols := range map[string][]string{"election_candidates": {"candidate_id"}, "election_leaders": {"leader_id"}, "election_history": {"leader_id"}} {
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

// TestNoIndexOnVirtualColumn: on MySQL, MariaDB and TiDB no index of the
// election tables covers a virtual generated column (schema version 6).
// With one, MariaDB's purge opens the table to compute the column's values
// for the index, and on MariaDB 10.11 a purge worker caught in that
// (open_purge_table, in two backtraces a second apart) grew the server by
// about 250 MB a second until the kernel killed it: the index on
// election_leaders.free_at until version 5.
func TestNoIndexOnVirtualColumn(t *testing.T) {
	ran := false
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "mysql" {
			continue
		}
		ran = true
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			var virtual []string
			if err := db.Raw("SELECT CONCAT(table_name, '.', column_name) FROM information_schema.columns WHERE table_schema = DATABASE() " +
				"AND table_name LIKE 'election\\_%' AND UPPER(extra) LIKE '%VIRTUAL%'").Scan(&virtual).Error; err != nil {
				t.Fatal(err)
			}
			if len(virtual) == 0 {
				t.Fatal("no virtual column found: election_leaders.free_at is one")
			}
			var indexed []string
			if err := db.Raw("SELECT CONCAT(s.table_name, '.', s.column_name, ' in ', s.index_name) FROM information_schema.statistics s " +
				"JOIN information_schema.columns c ON c.table_schema = s.table_schema AND c.table_name = s.table_name AND c.column_name = s.column_name " +
				"WHERE s.table_schema = DATABASE() AND s.table_name LIKE 'election\\_%' AND UPPER(c.extra) LIKE '%VIRTUAL%'").Scan(&indexed).Error; err != nil {
				t.Fatal(err)
			}
			if len(indexed) > 0 {
				t.Errorf("indexed virtual columns %v (of %v): an index on a virtual column makes MariaDB's purge open the table", indexed, virtual)
			}
		})
	}
	if !ran {
		t.Skip("mysql not configured")
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

// TestUpgradeFromV1: a database at schema version 1 with rows in it (as a
// release before version 2 left it) upgrades to version 2 with Up: the rows
// are intact, the identity columns take their defaults, the history starts
// empty, and elections go on from the stored term. Version 2's down
// statements (as golang-migrate would run them) take the schema back to
// version 1, rows intact.
func TestUpgradeFromV1(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			ms, err := migrate.Migrations(tg.Name)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) < 2 || ms[0].Version != 1 || ms[1].Version != 2 {
				t.Fatalf("migrations %+v, want versions 1 and 2", ms)
			}
			// Version 1 only, recorded as Up records it.
			run := func(stmts []string) {
				t.Helper()
				for _, stmt := range stmts {
					if err := db.Exec(stmt).Error; err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
			}
			run(ms[0].Up)
			run([]string{"CREATE TABLE " + migrate.VersionsTable + " (version BIGINT NOT NULL PRIMARY KEY, name VARCHAR(191) NOT NULL)"})
			if err := db.Exec("INSERT INTO "+migrate.VersionsTable+" (version, name) VALUES (?, ?)", 1, ms[0].Name).Error; err != nil {
				t.Fatal(err)
			}
			ns, leader, other := testdb.Namespace(t), uuid.New(), uuid.New()
			const (
				reg = "2026-01-02 03:04:05.123456"
				hb  = "2026-01-02 03:04:35.654321"
				exp = "2026-01-02 03:05:35.654321"
				acq = "2026-01-02 03:00:00.000001"
			)
			for _, id := range []uuid.UUID{leader, other} {
				if err := db.Exec("INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?)",
					ns, id, reg, hb, exp).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Exec("INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 7, ?, ?, ?)",
				ns, leader, exp, acq, hb).Error; err != nil {
				t.Fatal(err)
			}

			// This release on a database still at version 1: calls that
			// write identity say to migrate, and change nothing.
			ev1, err := election.New(db, election.WithNamespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ev1.Elect(ctx, uuid.New()); !errors.Is(err, election.ErrNotMigrated) {
				t.Fatalf("Elect on version 1: %v, want ErrNotMigrated", err)
			}
			if err := ev1.RegisterCandidate(ctx, uuid.New()); !errors.Is(err, election.ErrNotMigrated) {
				t.Fatalf("RegisterCandidate on version 1: %v, want ErrNotMigrated", err)
			}
			checkV1Rows(t, db, ns, leader, other, false)

			if err := migrate.Up(ctx, db); err != nil {
				t.Fatalf("Up from version 1: %v", err)
			}
			if got, want := appliedVersions(t, db), allVersions(t, tg.Name); !cmp.Equal(got, want) {
				t.Fatalf("applied versions %v, want %v", got, want)
			}
			wantTables(t, db, true)
			checkV1Rows(t, db, ns, leader, other, true)
			var n int64
			if err := db.Raw("SELECT COUNT(*) FROM election_history").Scan(&n).Error; err != nil || n != 0 {
				t.Fatalf("history after the upgrade: %d rows, %v; want 0", n, err)
			}

			// Version 2's down file, alone: back to version 1, rows intact.
			run(ms[1].Down)
			if db.Migrator().HasTable("election_history") {
				t.Fatal("election_history survived version 2's down statements")
			}
			for _, col := range []string{"hostname", "pid", "label"} {
				if db.Migrator().HasColumn("election_candidates", col) {
					t.Errorf("election_candidates.%s survived version 2's down statements", col)
				}
			}
			checkV1Rows(t, db, ns, leader, other, false)
			if err := db.Exec("DELETE FROM " + migrate.VersionsTable + " WHERE version = 2").Error; err != nil {
				t.Fatal(err)
			}
			if err := migrate.Up(ctx, db); err != nil {
				t.Fatalf("Up again: %v", err)
			}
			checkV1Rows(t, db, ns, leader, other, true)

			// Elections go on from the stored term, and the history
			// begins with the first term granted on version 2.
			e, err := election.New(db, election.WithNamespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			l, err := e.Elect(ctx, other)
			if err != nil {
				t.Fatalf("Elect after the upgrade: %v", err)
			}
			if !l.HeldBy(other) || l.Term != 8 {
				t.Fatalf("Elect after the upgrade: %+v, want %s in term 8", l, other)
			}
			h, err := e.History(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != 1 || h[0].Term != 8 || h[0].Leader != other || h[0].Ended() || h[0].Identity != e.Identity() {
				t.Fatalf("history after the first grant on version 2: %+v", h)
			}
		})
	}
}

// checkV1Rows checks the rows TestUpgradeFromV1 wrote at version 1, and,
// with v2, that their identity columns hold the defaults.
func checkV1Rows(t *testing.T, db *gorm.DB, ns string, leader, other uuid.UUID, v2 bool) {
	t.Helper()
	at := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04:05.999999", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var cands []struct {
		CandidateID                              string
		RegisteredAt, LastHeartbeatAt, ExpiresAt time.Time
	}
	if err := db.Raw("SELECT candidate_id, registered_at, last_heartbeat_at, expires_at FROM election_candidates WHERE namespace = ? ORDER BY candidate_id", ns).
		Scan(&cands).Error; err != nil {
		t.Fatalf("reading the candidates: %v", err)
	}
	if len(cands) != 2 {
		t.Fatalf("%d candidate rows, want 2", len(cands))
	}
	for _, c := range cands {
		if id, err := uuid.Parse(c.CandidateID); err != nil || (id != leader && id != other) ||
			!c.RegisteredAt.Equal(at("2026-01-02 03:04:05.123456")) || !c.LastHeartbeatAt.Equal(at("2026-01-02 03:04:35.654321")) ||
			!c.ExpiresAt.Equal(at("2026-01-02 03:05:35.654321")) {
			t.Errorf("candidate row changed: %+v", c)
		}
	}
	var l struct {
		LeaderID       string
		Term           int64
		LeaseExpiresAt time.Time
		AcquiredAt     time.Time
	}
	if err := db.Raw("SELECT leader_id, term, lease_expires_at, acquired_at FROM election_leaders WHERE namespace = ?", ns).Scan(&l).Error; err != nil {
		t.Fatalf("reading the leader row: %v", err)
	}
	if l.LeaderID != leader.String() || l.Term != 7 || !l.LeaseExpiresAt.Equal(at("2026-01-02 03:05:35.654321")) ||
		!l.AcquiredAt.Equal(at("2026-01-02 03:00:00.000001")) {
		t.Errorf("leader row changed: %+v", l)
	}
	if !v2 {
		return
	}
	var idents []struct {
		Hostname string
		PID      int64
		Label    string
	}
	if err := db.Raw("SELECT hostname, pid, label FROM election_candidates WHERE namespace = ?", ns).Scan(&idents).Error; err != nil {
		t.Fatalf("reading the identity columns: %v", err)
	}
	for _, id := range idents {
		if id.Hostname != "" || id.PID != 0 || id.Label != "" {
			t.Errorf("a version 1 row has the identity %+v, want the defaults", id)
		}
	}
}
