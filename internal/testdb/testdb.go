// Package testdb picks the databases tests run against.
//
// SQLite always runs, on a file in the test's temporary directory, through
// the driver SQLELECT_SQLITE_DRIVER names (mattn or modernc; by default
// mattn/go-sqlite3 with cgo, modernc.org/sqlite without).
// PostgreSQL and MySQL run when SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN
// name them (any form session.Open accepts). With CI=true a database that is
// not configured or does not answer fails the test instead of skipping it.
//
// Tests on PostgreSQL and MySQL share the configured database and its
// tables; they keep out of each other's way by using a namespace of their
// own (Namespace). Tests that need an empty database (no tables) get one
// from Fresh.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// Environment variables naming the server databases.
const (
	PostgresEnv = "SQLELECT_POSTGRES_DSN"
	MySQLEnv    = "SQLELECT_MYSQL_DSN"
	// PostgresPoolerEnv, set to "transaction", says that SQLELECT_POSTGRES_DSN
	// reaches PostgreSQL through a pooler in transaction mode (PgBouncer),
	// where notifications are not delivered.
	PostgresPoolerEnv = "SQLELECT_POSTGRES_POOLER"
	// OnlyEnv, when set, names the targets to test, comma-separated
	// (sqlite, postgres, mysql): the others are left out, and with CI=true
	// only a listed server's missing DSN is a failure. It runs the suites
	// against one server, such as SQLELECT_MYSQL_DSN pointing at TiDB.
	OnlyEnv = "SQLELECT_TEST_ONLY"
	// SQLiteDriverEnv, when set, names the driver of every SQLite DSN that
	// does not choose one, in the test binary and the processes it starts:
	// "mattn" (mattn/go-sqlite3, cgo) or "modernc" (modernc.org/sqlite,
	// pure Go). It runs the SQLite suites on either driver.
	SQLiteDriverEnv = "SQLELECT_SQLITE_DRIVER"
)

func init() {
	if name := os.Getenv(SQLiteDriverEnv); name != "" {
		if _, err := dialect.SetDefaultSQLiteDriver(name); err != nil {
			panic(fmt.Sprintf("testdb: %s=%s: %v", SQLiteDriverEnv, name, err))
		}
	}
}

// SQLiteDriver names the driver the SQLite tests run on: "mattn" or
// "modernc".
func SQLiteDriver() string { return dialect.DefaultSQLiteDriver() }

// SQLiteSQL returns what to give sql.Open for the SQLite file at path, on
// the driver the SQLite tests run on, with the settings session.Open adds:
// the database/sql driver name and the driver's own DSN.
func SQLiteSQL(tb testing.TB, path string) (driverName, dsn string) {
	tb.Helper()
	o, err := dialect.Open("sqlite:" + path)
	if err != nil {
		tb.Fatalf("the SQLite DSN of %s: %v", path, err)
	}
	return o.DriverName, o.DSN
}

// PlainSQLite is GORM's SQLite dialector for path on the driver the SQLite
// tests run on, opened the plain way (sql.Open, nothing added), with that
// driver's own DSN parameters: mattnParams on mattn/go-sqlite3,
// moderncParams on modernc.org/sqlite (each "" or starting with "?").
func PlainSQLite(tb testing.TB, path, mattnParams, moderncParams string) gorm.Dialector {
	tb.Helper()
	name, _ := SQLiteSQL(tb, path)
	if SQLiteDriver() == dialect.SQLiteModernc {
		return &gormsqlite.Dialector{DriverName: name, DSN: path + moderncParams}
	}
	return &gormsqlite.Dialector{DriverName: name, DSN: path + mattnParams}
}

// wanted reports whether the target called name is to be tested (OnlyEnv).
func wanted(name string) bool {
	only := os.Getenv(OnlyEnv)
	if only == "" {
		return true
	}
	for _, n := range strings.Split(only, ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// TransactionPooler reports whether the configured PostgreSQL is reached
// through a pooler in transaction mode (PostgresPoolerEnv).
func TransactionPooler() bool { return os.Getenv(PostgresPoolerEnv) == "transaction" }

// SkipWithoutNotifications skips tb on a PostgreSQL target reached through
// a transaction pooler, where LISTEN never delivers and the library polls
// instead: for tests that require the notifications themselves.
func SkipWithoutNotifications(tb testing.TB, tg Target) {
	tb.Helper()
	if tg.Name == "postgres" && TransactionPooler() {
		tb.Skip("notifications are not delivered through a transaction pooler (the library polls; see TestHandoffThroughPooler)")
	}
}

// WakesOtherPools reports whether a handoff on tg wakes candidates on other
// pools (other processes): through NOTIFY on PostgreSQL without a
// transaction pooler, through a file beside the database on SQLite on
// Linux, through KILL QUERY on MySQL, MariaDB and TiDB.
func WakesOtherPools(tg Target) bool {
	switch tg.Name {
	case "postgres":
		return !TransactionPooler()
	case "sqlite":
		return runtime.GOOS == "linux"
	case "mysql":
		return true
	}
	return false
}

// Target is one database to run tests against.
type Target struct {
	// Name is "sqlite", "postgres" or "mysql".
	Name string
	// DSN is the configured DSN; for SQLite it is empty and every Open makes
	// a new file.
	DSN string
	// Driver, for SQLite, names the driver ("mattn" or "modernc"); empty
	// means the default (SQLiteDriver).
	Driver string
}

// SQLiteDSN is the DSN of the SQLite file at path on tg's driver.
func (tg Target) SQLiteDSN(path string) string {
	if tg.Driver == "" {
		return "sqlite:" + path
	}
	return "sqlite:" + path + "?driver=" + tg.Driver
}

// SQLiteDrivers returns a SQLite target per driver this test binary can
// use: mattn/go-sqlite3 when built with cgo, and modernc.org/sqlite.
func SQLiteDrivers() []Target {
	var out []Target
	for _, d := range dialect.SQLiteDrivers() {
		out = append(out, Target{Name: "sqlite", Driver: d})
	}
	return out
}

// Targets returns the databases to test against (all three, or those
// OnlyEnv lists). It fails tb when CI=true and a server database to test is
// not configured.
func Targets(tb testing.TB) []Target {
	tb.Helper()
	var out []Target
	if wanted("sqlite") {
		out = append(out, Target{Name: "sqlite"})
	}
	for _, s := range []struct{ name, env string }{{"postgres", PostgresEnv}, {"mysql", MySQLEnv}} {
		if !wanted(s.name) {
			continue
		}
		dsn := os.Getenv(s.env)
		if dsn == "" {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("CI=true but %s is not set: the %s tests cannot run", s.env, s.name)
			}
			continue
		}
		out = append(out, Target{Name: s.name, DSN: dsn})
	}
	return out
}

// Only returns the configured target called name ("postgres", "mysql" or
// "sqlite"), and skips tb when it is not configured (which CI=true has
// already made a failure in Targets).
func Only(tb testing.TB, name string) Target {
	tb.Helper()
	for _, tg := range Targets(tb) {
		if tg.Name == name {
			return tg
		}
	}
	tb.Skipf("%s not configured", name)
	return Target{}
}

// Servers returns the configured PostgreSQL and MySQL targets, the ones
// reached over TCP. It skips tb when there are none (which CI=true has
// already made a failure in Targets).
func Servers(tb testing.TB) []Target {
	tb.Helper()
	var out []Target
	for _, tg := range Targets(tb) {
		if tg.Name != "sqlite" {
			out = append(out, tg)
		}
	}
	if len(out) == 0 {
		tb.Skip("no PostgreSQL or MySQL configured")
	}
	return out
}

// Each runs fn as a subtest per target, with a migrated database.
func Each(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	t.Helper()
	for _, tg := range Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			fn(t, Open(t, tg))
		})
	}
}

var migrated sync.Map // DSN -> struct{}

// Open opens target's database with session.Open, makes sure the election
// tables exist, and closes it when the test ends. On SQLite it is a new
// file each time (see SQLitePath for opening the same file twice).
func Open(tb testing.TB, tg Target) *gorm.DB {
	tb.Helper()
	dsn := tg.DSN
	if tg.Name == "sqlite" {
		dsn = tg.SQLiteDSN(filepath.Join(tb.TempDir(), "election.db"))
	}
	db := OpenDSN(tb, dsn)
	if _, done := migrated.Load(dsn); !done {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := migrate.Up(ctx, db); err != nil {
			tb.Fatalf("migrate.Up on %s: %v", tg.Name, err)
		}
		migrated.Store(dsn, struct{}{})
	}
	return db
}

// Shared returns a DSN that reaches the same migrated database every time
// it is opened (a file of the test's own for SQLite, the configured database
// for the others), and a handle on it.
func Shared(tb testing.TB, tg Target) (string, *gorm.DB) {
	tb.Helper()
	if tg.Name != "sqlite" {
		return tg.DSN, Open(tb, tg)
	}
	dsn := tg.SQLiteDSN(filepath.Join(tb.TempDir(), "shared.db"))
	db := OpenDSN(tb, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, db); err != nil {
		tb.Fatalf("migrate.Up: %v", err)
	}
	return dsn, db
}

// OpenDSN opens dsn with session.Open and closes it when the test ends. It
// does not migrate.
func OpenDSN(tb testing.TB, dsn string) *gorm.DB {
	tb.Helper()
	db, err := session.Open(dsn)
	if err != nil {
		tb.Fatalf("opening the test database: %v", err)
	}
	tb.Cleanup(func() { Close(db) })
	return db
}

// Close closes db's pool.
func Close(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// Namespace returns a namespace no other test uses.
func Namespace(tb testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(tb.Name())
	if len(name) > 120 {
		name = name[len(name)-120:]
	}
	return name + "." + hex.EncodeToString(b[:])
}

// Fresh returns the DSN of an empty database of target's kind that is
// dropped when the test ends: a new file for SQLite, a new database on the
// PostgreSQL or MySQL server.
func Fresh(tb testing.TB, tg Target) string {
	tb.Helper()
	if tg.Name == "sqlite" {
		return tg.SQLiteDSN(filepath.Join(tb.TempDir(), "fresh.db"))
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "sqlelect_t_" + hex.EncodeToString(b[:])
	admin := OpenDSN(tb, tg.DSN)
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		tb.Fatalf("creating database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if tg.Name == "postgres" {
			admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		} else {
			admin.Exec("DROP DATABASE IF EXISTS " + name)
		}
	})
	return withDatabase(tb, tg, name)
}

// withDatabase rewrites tg's DSN to name database db instead.
func withDatabase(tb testing.TB, tg Target, db string) string {
	tb.Helper()
	dsn := tg.DSN
	if tg.Name == "postgres" {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("parsing %s: %v", PostgresEnv, err)
		}
		u.Path = "/" + db
		return u.String()
	}
	// mysql://user:pass@tcp(host:port)/db?params or the driver's own form.
	prefix := ""
	if strings.HasPrefix(dsn, "mysql://") {
		prefix, dsn = "mysql://", strings.TrimPrefix(dsn, "mysql://")
	}
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		tb.Fatalf("%s has no /database part", MySQLEnv)
	}
	rest := ""
	if q := strings.Index(dsn[slash:], "?"); q >= 0 {
		rest = dsn[slash+q:]
	}
	return prefix + dsn[:slash] + "/" + db + rest
}

// Raw returns db's *sql.DB.
func Raw(tb testing.TB, db *gorm.DB) *sql.DB {
	tb.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		tb.Fatal(err)
	}
	return sqlDB
}

// String names the target for messages: its Name, and a SQLite target's
// driver when it names one ("sqlite-modernc").
func (tg Target) String() string {
	if tg.Driver != "" {
		return tg.Name + "-" + tg.Driver
	}
	return tg.Name
}

// TiDB reports whether db is a TiDB server (reached as the mysql target),
// as the library tells it: by a variable of TiDB's own, whatever VERSION()
// says.
func TiDB(tb testing.TB, db *gorm.DB) bool {
	tb.Helper()
	if db.Dialector.Name() != "mysql" {
		return false
	}
	d, err := dialect.For(db)
	if err != nil {
		tb.Fatalf("dialect: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if d, err = dialect.Detect(ctx, db, d); err != nil {
		tb.Fatalf("detecting TiDB: %v", err)
	}
	return dialect.TiDB(d)
}

// GaleraEnv names the nodes of a Galera cluster to test against: a comma
// separated list of MySQL DSNs, one per node, as internal/ci/galera.sh
// prints them.
const GaleraEnv = "SQLELECT_GALERA_DSNS"

// Galera returns the DSNs of the Galera cluster's nodes, at least two, or
// skips tb when GaleraEnv is not set (CI sets it in its Galera step, which
// fails if the cluster does not start).
func Galera(tb testing.TB) []string {
	tb.Helper()
	v := os.Getenv(GaleraEnv)
	if v == "" {
		tb.Skipf("%s is not set (internal/ci/galera.sh starts a cluster)", GaleraEnv)
	}
	dsns := strings.Split(v, ",")
	if len(dsns) < 2 {
		tb.Fatalf("%s names %d node(s); a cluster test needs at least 2", GaleraEnv, len(dsns))
	}
	return dsns
}

// ExampleDB opens a migrated SQLite database in a directory of its own,
// for runnable examples (which have no testing.T), and returns it with the
// function that closes it and removes the directory.
func ExampleDB() (*gorm.DB, func()) {
	dir, err := os.MkdirTemp("", "sqlelect-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := session.Open("sqlite:" + filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	if err := migrate.Up(context.Background(), db); err != nil {
		log.Fatal(err)
	}
	return db, func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		os.RemoveAll(dir)
	}
}
