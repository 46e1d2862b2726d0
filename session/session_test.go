package session_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// The package's TestMain (goleak.VerifyTestMain) is in password_test.go.

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// open opens dsn with session.Open and closes it when the test ends.
func open(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	db, err := session.Open(dsn)
	if err != nil {
		t.Fatalf("session.Open(%q): %v", dsn, err)
	}
	t.Cleanup(func() { testdb.Close(db) })
	return db
}

// serverDSN returns the configured DSN of a server database, or skips.
func serverDSN(t *testing.T, env string) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is not set", env)
		}
		t.Skipf("%s is not set", env)
	}
	return dsn
}

// works checks that db answers and can run an election.
func works(t *testing.T, db *gorm.DB, dialect string) {
	t.Helper()
	if got := db.Dialector.Name(); got != dialect && !(dialect == "sqlite" && got == "sqlite3") {
		t.Fatalf("dialect %s, want %s", got, dialect)
	}
	ctx := testCtx(t)
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatalf("migrate.Up: %v", err)
	}
	e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)))
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	id := uuid.New()
	l, err := e.Elect(ctx, id)
	if err != nil || l.Leader != id {
		t.Fatalf("Elect: %+v, %v", l, err)
	}
}

// TestOpenForms: every DSN form Open documents reaches its database.
func TestOpenForms(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, dsn string }{
		{"sqlite:PATH", "sqlite:" + filepath.Join(dir, "a.db")},
		{"sqlite:PATH without extension", "sqlite:" + filepath.Join(dir, "plain")},
		{"file:PATH", "file:" + filepath.Join(dir, "b.db")},
		{"file:PATH?params", "file:" + filepath.Join(dir, "c.sqlite") + "?cache=private"},
		{"PATH.db", filepath.Join(dir, "d.db")},
		{"sqlite::memory:", "sqlite::memory:"},
	} {
		t.Run(c.name, func(t *testing.T) { works(t, open(t, c.dsn), "sqlite") })
	}
	t.Run("postgres://", func(t *testing.T) {
		works(t, open(t, serverDSN(t, testdb.PostgresEnv)), "postgres")
	})
	t.Run("postgresql://", func(t *testing.T) {
		dsn := serverDSN(t, testdb.PostgresEnv)
		_, rest, ok := strings.Cut(dsn, "://")
		if !ok {
			t.Fatalf("%s is not a URL", testdb.PostgresEnv)
		}
		works(t, open(t, "postgresql://"+rest), "postgres")
	})
	t.Run("mysql://", func(t *testing.T) {
		dsn := serverDSN(t, testdb.MySQLEnv)
		if !strings.HasPrefix(dsn, "mysql://") {
			dsn = "mysql://" + dsn
		}
		works(t, open(t, dsn), "mysql")
	})
	t.Run("mysql native", func(t *testing.T) {
		dsn := strings.TrimPrefix(serverDSN(t, testdb.MySQLEnv), "mysql://")
		works(t, open(t, dsn), "mysql")
	})
}

// TestSQLiteSettings: SQLite opens in WAL mode with a busy timeout, and its
// transactions take the write lock when they begin.
func TestSQLiteSettings(t *testing.T) {
	db := open(t, "sqlite:"+filepath.Join(t.TempDir(), "wal.db"))
	var mode string
	var busy int
	if err := db.Raw("PRAGMA journal_mode").Row().Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.Raw("PRAGMA busy_timeout").Row().Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || busy <= 0 {
		t.Fatalf("journal_mode %s, busy_timeout %d: want wal and a positive timeout", mode, busy)
	}
	// Immediate transactions: a second writer's Begin waits for the first
	// transaction to end, even though the first has not written yet.
	tx := db.Begin()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	began := make(chan error, 1)
	var ended sync.WaitGroup
	ended.Add(1)
	go func() {
		defer ended.Done()
		tx2 := db.Begin()
		began <- tx2.Error
		if tx2.Error == nil {
			tx2.Rollback()
		}
	}()
	select {
	case err := <-began:
		t.Fatalf("a second transaction began while the first was open (%v): transactions are not immediate", err)
	case <-time.After(200 * time.Millisecond):
	}
	tx.Rollback()
	if err := <-began; err != nil {
		t.Fatalf("the second transaction: %v", err)
	}
	ended.Wait()
}

// TestSQLiteMemoryShared: sqlite::memory: is one database for every pooled
// connection.
func TestSQLiteMemoryShared(t *testing.T) {
	ctx := testCtx(t)
	db := open(t, "sqlite::memory:")
	sqlDB := testdb.Raw(t, db)
	sqlDB.SetMaxOpenConns(4)
	c1, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c1.ExecContext(ctx, "CREATE TABLE shared (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.ExecContext(ctx, "INSERT INTO shared VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var x int
	if err := c2.QueryRowContext(ctx, "SELECT x FROM shared").Scan(&x); err != nil || x != 42 {
		t.Fatalf("the second connection reads %d, %v: want the first one's row", x, err)
	}
	// Two memory databases are distinct.
	other := open(t, "sqlite::memory:")
	if other.Migrator().HasTable("shared") {
		t.Fatal("two sqlite::memory: handles share one database")
	}
}

// TestMySQLSettings: every MySQL connection Open makes runs in UTC at READ
// COMMITTED.
func TestMySQLSettings(t *testing.T) {
	ctx := testCtx(t)
	db := open(t, serverDSN(t, testdb.MySQLEnv))
	sqlDB := testdb.Raw(t, db)
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := sqlDB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var tz, level string
		if err := c.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&tz); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "SELECT @@session.transaction_isolation").Scan(&level); err != nil {
			if err := c.QueryRowContext(ctx, "SELECT @@session.tx_isolation").Scan(&level); err != nil {
				t.Fatal(err)
			}
		}
		if tz != "+00:00" || level != "READ-COMMITTED" {
			t.Fatalf("connection %d: time_zone %s, isolation %s; want +00:00 and READ-COMMITTED", i, tz, level)
		}
	}
	var now time.Time
	if err := db.Raw("SELECT SYSDATE(6)").Row().Scan(&now); err != nil {
		t.Fatalf("timestamps must scan as time.Time (parseTime): %v", err)
	}
	if d := time.Since(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("the database clock reads %v, %v from this host's: not UTC", now, d)
	}
}

// TestPostgresSettings: PostgreSQL sessions are in UTC.
func TestPostgresSettings(t *testing.T) {
	db := open(t, serverDSN(t, testdb.PostgresEnv))
	var tz string
	if err := db.Raw("SHOW TimeZone").Row().Scan(&tz); err != nil {
		t.Fatal(err)
	}
	if tz != "UTC" {
		t.Fatalf("TimeZone %s, want UTC", tz)
	}
}

// TestPostgresNamedStatementsByRoute: the pool Open builds prepares its
// statements under names on a direct connection, where the server then
// plans them once per connection, and leaves no named prepared statement
// on the server sessions of a pooler in transaction mode
// (SQLELECT_POSTGRES_POOLER=transaction), which would hand them to other
// clients; a DSN that names an exec mode gets it.
func TestPostgresNamedStatementsByRoute(t *testing.T) {
	dsn := serverDSN(t, testdb.PostgresEnv)
	pooled := testdb.TransactionPooler()
	for _, c := range []struct {
		name  string
		param string
		named bool
	}{
		{"default", "", !pooled},
		{"exec asked for", "default_query_exec_mode=exec", false},
		{"cache_statement asked for", "default_query_exec_mode=cache_statement", true},
	} {
		if pooled && c.named {
			continue // through a pooler, named statements break (the reason for exec mode)
		}
		t.Run(c.name, func(t *testing.T) {
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			if c.param != "" {
				u.RawQuery += "&" + c.param
			}
			db := open(t, u.String())
			works(t, db, "postgres")
			ctx := testCtx(t)
			conn, err := testdb.Raw(t, db).Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var n int
			for i := 0; i < 2; i++ {
				if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name <> '' AND $1", true).Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			if got := n > 0; got != c.named {
				t.Fatalf("%d named prepared statements on the session, want named ones: %v", n, c.named)
			}
		})
	}
}

// TestOpenUnreachable: a database that does not answer fails with
// ErrUnreachable, naming where it was looked for.
func TestOpenUnreachable(t *testing.T) {
	for _, c := range []struct{ name, dsn, where string }{
		{"postgres", "postgres://someone:pw@127.0.0.1:1/app?sslmode=disable&connect_timeout=5", "127.0.0.1:1"},
		{"mysql", "mysql://someone:pw@tcp(127.0.0.1:1)/app?timeout=5s", "127.0.0.1:1"},
		{"sqlite", "sqlite:" + filepath.Join(t.TempDir(), "missing", "dir", "x.db"), filepath.Join("missing", "dir", "x.db")},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := session.Open(c.dsn)
			if err == nil {
				testdb.Close(db)
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, session.ErrUnreachable) {
				t.Fatalf("got %v, want ErrUnreachable", err)
			}
			if !strings.Contains(err.Error(), c.where) {
				t.Fatalf("error %q does not name %s", err, c.where)
			}
		})
	}
}

// TestOpenBadDSN: forms Open does not know are refused with ErrDSN.
func TestOpenBadDSN(t *testing.T) {
	for _, dsn := range []string{"", "oracle://x", "sqlite:"} {
		if db, err := session.Open(dsn); !errors.Is(err, session.ErrDSN) {
			if db != nil {
				testdb.Close(db)
			}
			t.Errorf("Open(%q): got %v, want ErrDSN", dsn, err)
		}
	}
}

// TestWrap: a *sql.DB the application opened with each supported driver is
// wrapped and runs elections.
func TestWrap(t *testing.T) {
	wrap := func(t *testing.T, driverName, dsn, dialect string) {
		t.Helper()
		sqlDB, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sqlDB.Close() })
		db, err := session.Wrap(sqlDB)
		if err != nil {
			t.Fatalf("Wrap: %v", err)
		}
		if got, _ := db.DB(); got != sqlDB {
			t.Fatal("Wrap does not run on the given pool")
		}
		works(t, db, dialect)
	}
	t.Run("sqlite", func(t *testing.T) {
		name, dsn := testdb.SQLiteSQL(t, filepath.Join(t.TempDir(), "w.db"))
		wrap(t, name, dsn, "sqlite")
	})
	t.Run("pgx", func(t *testing.T) {
		wrap(t, "pgx", serverDSN(t, testdb.PostgresEnv), "postgres")
	})
	t.Run("mysql", func(t *testing.T) {
		cfg, err := drv.ParseDSN(strings.TrimPrefix(serverDSN(t, testdb.MySQLEnv), "mysql://"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ParseTime = true
		wrap(t, "mysql", cfg.FormatDSN(), "mysql")
	})
	if _, err := session.Wrap(nil); err == nil {
		t.Fatal("Wrap(nil): no error")
	}
	t.Run("unsupported driver", func(t *testing.T) {
		sqlDB := sql.OpenDB(otherConnector{})
		defer sqlDB.Close()
		_, err := session.Wrap(sqlDB)
		if err == nil || !strings.Contains(err.Error(), "session_test.otherDriver is not supported (want pgx") {
			t.Fatalf("Wrap of another driver: %v", err)
		}
	})
}

// otherDriver is a database/sql driver Wrap does not know.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a database") }

type otherConnector struct{}

func (otherConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("not a database")
}
func (otherConnector) Driver() driver.Driver { return otherDriver{} }

// scratch creates a one-column table of the test's own and drops it when
// the test ends.
func scratch(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "session_t_" + hex.EncodeToString(b[:])
	if err := db.Exec("CREATE TABLE " + name + " (id INTEGER NOT NULL PRIMARY KEY)").Error; err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + name) })
	return name
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

// sqlRecorder is a GORM logger that keeps every statement it sees.
type sqlRecorder struct {
	mu   sync.Mutex
	stmt []string
}

func (r *sqlRecorder) LogMode(logger.LogLevel) logger.Interface { return r }
func (r *sqlRecorder) Info(context.Context, string, ...any)     {}
func (r *sqlRecorder) Warn(context.Context, string, ...any)     {}
func (r *sqlRecorder) Error(context.Context, string, ...any)    {}
func (r *sqlRecorder) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	s, _ := fc()
	r.mu.Lock()
	r.stmt = append(r.stmt, s)
	r.mu.Unlock()
}

func (r *sqlRecorder) saw(substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stmt {
		if strings.Contains(strings.ToUpper(s), substr) {
			return true
		}
	}
	return false
}

// TestFromTxAndTransaction: FromTx runs statements in the caller's
// *sql.Tx; Transaction joins a transaction without savepoint or commit, and
// otherwise begins, commits and rolls back its own.
func TestFromTxAndTransaction(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		boom := errors.New("boom")

		t.Run("FromTx", func(t *testing.T) {
			table := scratch(t, db)
			if _, err := session.FromTx(db, nil); !errors.Is(err, session.ErrNotTransaction) {
				t.Fatalf("FromTx(nil): %v, want ErrNotTransaction", err)
			}
			for _, commit := range []bool{false, true} {
				tx, err := testdb.Raw(t, db).BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				h, err := session.FromTx(db, tx)
				if err != nil {
					t.Fatal(err)
				}
				if !session.InTransaction(h) || session.InTransaction(db) {
					t.Fatal("InTransaction is wrong about the handles")
				}
				if err := h.Exec("INSERT INTO "+table+" (id) VALUES (?)", 1).Error; err != nil {
					t.Fatal(err)
				}
				if n := count(t, h, table); n != 1 {
					t.Fatalf("the transaction sees %d rows, want its own 1", n)
				}
				if n := count(t, db, table); n != 0 {
					t.Fatalf("another connection sees %d uncommitted rows", n)
				}
				want := int64(0)
				if commit {
					err, want = tx.Commit(), 1
				} else {
					err = tx.Rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
				if n := count(t, db, table); n != want {
					t.Fatalf("after commit=%v: %d rows, want %d", commit, n, want)
				}
			}
		})

		t.Run("JoinsTransaction", func(t *testing.T) {
			table := scratch(t, db)
			rec := &sqlRecorder{}
			tx := db.Session(&gorm.Session{Logger: rec}).Begin()
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			defer tx.Rollback()
			var joined *gorm.DB
			err := session.Transaction(ctx, tx, nil, func(h *gorm.DB) error {
				joined = h
				if err := h.Exec("INSERT INTO "+table+" (id) VALUES (?)", 1).Error; err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Transaction returned %v, want the callback's error", err)
			}
			if joined.Statement.ConnPool != tx.Statement.ConnPool {
				t.Fatal("the callback did not run in the caller's transaction")
			}
			// No savepoint was rolled back to, nothing was committed.
			if n := count(t, tx, table); n != 1 {
				t.Fatalf("the caller's transaction sees %d rows after the callback failed, want 1 (no savepoint)", n)
			}
			if n := count(t, db, table); n != 0 {
				t.Fatalf("another connection sees %d rows: the joined transaction was committed", n)
			}
			if !rec.saw("INSERT INTO") {
				t.Fatal("the statement recorder saw nothing")
			}
			if rec.saw("SAVEPOINT") {
				t.Fatalf("Transaction opened a savepoint: %q", rec.stmt)
			}
			// The caller still owns the transaction.
			if err := tx.Exec("INSERT INTO "+table+" (id) VALUES (?)", 2).Error; err != nil {
				t.Fatalf("the caller's transaction is no longer usable: %v", err)
			}
			if err := tx.Rollback().Error; err != nil {
				t.Fatalf("rollback: %v", err)
			}
			if n := count(t, db, table); n != 0 {
				t.Fatalf("%d rows after the caller rolled back", n)
			}
		})

		t.Run("BeginsItsOwn", func(t *testing.T) {
			table := scratch(t, db)
			err := session.Transaction(ctx, db, nil, func(h *gorm.DB) error {
				if !session.InTransaction(h) {
					t.Error("the callback does not run in a transaction")
				}
				if err := h.Exec("INSERT INTO "+table+" (id) VALUES (?)", 1).Error; err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Transaction returned %v, want the callback's error", err)
			}
			if n := count(t, db, table); n != 0 {
				t.Fatalf("%d rows after the callback failed: not rolled back", n)
			}
			err = session.Transaction(ctx, db, nil, func(h *gorm.DB) error {
				return h.Exec("INSERT INTO "+table+" (id) VALUES (?)", 1).Error
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := count(t, db, table); n != 1 {
				t.Fatalf("%d rows after the callback succeeded: not committed", n)
			}
		})
	})
}

// TestPostgresHungFirstHost: with a multi-host DSN whose first host accepts
// connections and never answers, Open gives that host a bounded attempt (5 s
// when the DSN sets no connect_timeout) and reaches the second, well within
// its own 10 s ping bound.
func TestPostgresHungFirstHost(t *testing.T) {
	u, err := url.Parse(serverDSN(t, testdb.PostgresEnv))
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "5432")
	}
	silent := silentServer(t)
	u.Host = silent + "," + u.Host
	start := time.Now()
	db := open(t, u.String())
	took := time.Since(start)
	works(t, db, "postgres")
	if took < 4*time.Second || took > 9*time.Second {
		t.Errorf("Open took %v, want about the 5 s connect timeout", took)
	}
	t.Logf("Open past a hung first host took %v", took)
}
