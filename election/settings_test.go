package election_test

import (
	"context"
	"errors"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// openPlain opens a database the plain GORM way and closes it when the test
// ends.
func openPlain(t *testing.T, d gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	t.Cleanup(func() { testdb.Close(db) })
	return db
}

// wantUnsafe fails unless err is ErrUnsafeDatabase and its message names
// the setting to add.
func wantUnsafe(t *testing.T, err error, setting string) {
	t.Helper()
	if !errors.Is(err, election.ErrUnsafeDatabase) {
		t.Fatalf("New: got %v, want ErrUnsafeDatabase", err)
	}
	if !strings.Contains(err.Error(), setting) {
		t.Fatalf("New's error %q does not name %s", err, setting)
	}
}

// TestPlainSQLite: a SQLite handle opened the plain way, on the driver the
// tests run on, either works under contention or is refused with the
// setting to add, in that driver's own parameters.
func TestPlainSQLite(t *testing.T) {
	dir := t.TempDir()
	setup := testdb.OpenDSN(t, "sqlite:"+filepath.Join(dir, "plain.db"))
	must(t, "migrate.Up", migrate.Up(testCtx(t), setup))
	path := filepath.Join(dir, "plain.db")
	journal, busy := "_journal_mode=WAL", "_busy_timeout=5000"
	if testdb.SQLiteDriver() == "modernc" {
		journal, busy = "_pragma=journal_mode(WAL)", "_pragma=busy_timeout(5000)"
	}

	t.Run("RollbackJournal", func(t *testing.T) {
		// A new file: its journal mode is the default.
		db := openPlain(t, testdb.PlainSQLite(t, filepath.Join(dir, "rollback.db"), "", ""))
		_, err := election.New(db)
		wantUnsafe(t, err, journal)
	})
	t.Run("NoBusyTimeout", func(t *testing.T) {
		// (mattn/go-sqlite3's own default is 5 s, and 0 turns the wait
		// off; modernc.org/sqlite's default is 0.)
		db := openPlain(t, testdb.PlainSQLite(t, path, "?_journal_mode=WAL&_busy_timeout=0", "?_pragma=journal_mode(WAL)"))
		_, err := election.New(db)
		wantUnsafe(t, err, busy)
	})
	t.Run("WALWithBusyTimeout", func(t *testing.T) {
		// Deferred transactions: Elect takes the write lock first.
		db := openPlain(t, testdb.PlainSQLite(t, path, "?_journal_mode=WAL&_busy_timeout=5000", "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)"))
		raceFresh(t, db, contenders, 3)
		contend(t, db, false)
	})
}

// mysqlPlainDSN returns the configured MySQL database's DSN in the driver's
// own form with nothing but the credentials, address and database, plus
// the given parameters.
func mysqlPlainDSN(t *testing.T, params func(*drv.Config)) string {
	t.Helper()
	dsn := os.Getenv(testdb.MySQLEnv)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is not set", testdb.MySQLEnv)
		}
		t.Skipf("%s is not set", testdb.MySQLEnv)
	}
	cfg, err := drv.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatalf("parsing %s: %v", testdb.MySQLEnv, err)
	}
	plain := drv.NewConfig()
	plain.User, plain.Passwd, plain.Net, plain.Addr, plain.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
	params(plain)
	return plain.FormatDSN()
}

// TestPlainMySQL: a MySQL handle opened with only parseTime=true (server
// side prepares, REPEATABLE READ, the server's time zone) works under
// contention on fresh namespaces, the case that deadlocks on gap locks
// when Elect's transactions run at REPEATABLE READ.
func TestPlainMySQL(t *testing.T) {
	dsn := mysqlPlainDSN(t, func(c *drv.Config) { c.ParseTime = true })
	db := openPlain(t, gormmysql.Open(dsn))
	testdb.Raw(t, db).SetMaxOpenConns(24)
	var level string
	if err := db.Raw("SELECT @@SESSION.tx_isolation").Row().Scan(&level); err != nil {
		must(t, "reading the isolation level", db.Raw("SELECT @@SESSION.transaction_isolation").Row().Scan(&level))
	}
	if level != "REPEATABLE-READ" {
		t.Logf("the server's default isolation is %s, not REPEATABLE-READ: the gap-lock case is not exercised", level)
	}
	must(t, "migrate.Up", migrate.Up(testCtx(t), db))
	t.Run("RaceToCreate", func(t *testing.T) { raceFresh(t, db, contenders, freshRaces) })
	t.Run("RaceDistinctNamespaces", func(t *testing.T) { raceDistinct(t, db, contenders) })
	t.Run("FreshNamespace", func(t *testing.T) { contend(t, db, false) })
}

// TestMySQLWithoutParseTime: New refuses a MySQL handle that returns
// timestamps as text, naming parseTime.
func TestMySQLWithoutParseTime(t *testing.T) {
	dsn := mysqlPlainDSN(t, func(*drv.Config) {})
	db := openPlain(t, gormmysql.Open(dsn))
	_, err := election.New(db)
	wantUnsafe(t, err, "parseTime")
}

// TestNewRefusesNonDatabases: New needs a database handle.
func TestNewRefusesNonDatabases(t *testing.T) {
	if _, err := election.New(nil); !errors.Is(err, election.ErrInvalidOption) {
		t.Fatalf("New(nil): got %v, want ErrInvalidOption", err)
	}
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		tx := db.Begin()
		must(t, "Begin", tx.Error)
		_, err := election.New(tx)
		tx.Rollback()
		if !errors.Is(err, election.ErrInvalidOption) {
			t.Fatalf("New(transaction): got %v, want ErrInvalidOption", err)
		}
		sqlTx, err := testdb.Raw(t, db).Begin()
		must(t, "BeginTx", err)
		defer sqlTx.Rollback()
		h, err := session.FromTx(db, sqlTx)
		must(t, "FromTx", err)
		if _, err := election.New(h); !errors.Is(err, election.ErrInvalidOption) {
			t.Fatalf("New(FromTx handle): got %v, want ErrInvalidOption", err)
		}
	})
}

// configSnapshot is what New must leave as it found on the caller's handle.
type configSnapshot struct {
	Config                                                      *gorm.Config
	Logger                                                      logger.Interface
	NowFunc                                                     uintptr
	TranslateError, SkipDefaultTransaction, PrepareStmt, DryRun bool
	QueryFields, AllowGlobalUpdate, FullSaveAssociations        bool
	CreateBatchSize                                             int
	Dialector                                                   gorm.Dialector
	ConnPool                                                    gorm.ConnPool
	Statement                                                   *gorm.Statement
	StatementConnPool                                           gorm.ConnPool
	Plugins                                                     int
	Error                                                       error
}

func handleSnapshot(db *gorm.DB) configSnapshot {
	return configSnapshot{
		Config: db.Config, Logger: db.Logger, NowFunc: reflect.ValueOf(db.NowFunc).Pointer(),
		TranslateError: db.TranslateError, SkipDefaultTransaction: db.SkipDefaultTransaction,
		PrepareStmt: db.PrepareStmt, DryRun: db.DryRun, QueryFields: db.QueryFields,
		AllowGlobalUpdate: db.AllowGlobalUpdate, FullSaveAssociations: db.FullSaveAssociations,
		CreateBatchSize: db.CreateBatchSize, Dialector: db.Dialector, ConnPool: db.ConnPool,
		Statement: db.Statement, StatementConnPool: db.Statement.ConnPool, Plugins: len(db.Plugins),
		Error: db.Error,
	}
}

// TestNewLeavesCallersHandle: New and the calls never change the caller's
// *gorm.DB: not its Config, logger, clock, error translation or pool.
func TestNewLeavesCallersHandle(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, _ := testdb.Shared(t, tg)
			callerLogger := logger.New(log.New(os.Stderr, "", 0), logger.Config{LogLevel: logger.Error})
			now := func() time.Time { return time.Now().Add(time.Minute) }
			db, err := session.Open(dsn, &gorm.Config{Logger: callerLogger, NowFunc: now, TranslateError: false, CreateBatchSize: 7})
			must(t, "session.Open", err)
			t.Cleanup(func() { testdb.Close(db) })
			before := handleSnapshot(db)

			ctx := testCtx(t)
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns, election.WithExpire(time.Second))
			a := uuid.New()
			l := mustElect(t, e, a)
			must(t, "Guard", e.Guard(ctx, l))
			must(t, "Resign", e.Resign(ctx, a))
			tx := db.Begin()
			_, err = e.Elect(ctx, a, election.WithTx(tx))
			must(t, "Elect WithTx", err)
			must(t, "Commit", tx.Commit().Error)

			after := handleSnapshot(db)
			if before != after {
				t.Fatalf("the caller's handle changed:\nbefore %+v\nafter  %+v", before, after)
			}
			if db.Logger != callerLogger || db.Config.TranslateError || db.CreateBatchSize != 7 {
				t.Fatal("the caller's settings changed")
			}
		})
	}
}

// TestNotMigrated: before migrate.Up every call returns ErrNotMigrated and
// creates nothing; after it they work.
func TestNotMigrated(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			e, err := election.New(db, election.WithLogger(quiet))
			must(t, "New on an empty database", err)
			a := uuid.New()
			lease := election.Lease{Namespace: e.Namespace(), Leader: a, Term: 1, ExpiresAt: time.Now().Add(time.Hour)}
			calls := map[string]error{}
			calls["RegisterCandidate"] = e.RegisterCandidate(ctx, a)
			calls["Heartbeat"] = e.Heartbeat(ctx, a)
			_, calls["Elect"] = e.Elect(ctx, a)
			_, calls["IsLeader"] = e.IsLeader(ctx, a)
			_, calls["Leader"] = e.Leader(ctx)
			_, calls["ListCandidates"] = e.ListCandidates(ctx)
			calls["UnregisterCandidate"] = e.UnregisterCandidate(ctx, a)
			calls["Resign"] = e.Resign(ctx, a)
			calls["Guard"] = e.Guard(ctx, lease)
			_, calls["Prune"] = e.Prune(ctx)
			for name, err := range calls {
				if !errors.Is(err, election.ErrNotMigrated) {
					t.Errorf("%s on an empty database: got %v, want ErrNotMigrated", name, err)
				}
			}
			for _, table := range []string{"election_candidates", "election_leaders", migrate.VersionsTable} {
				if db.Migrator().HasTable(table) {
					t.Errorf("a call created table %s", table)
				}
			}
			must(t, "migrate.Up", migrate.Up(ctx, db))
			l, err := e.Elect(ctx, a)
			must(t, "Elect after migrate.Up", err)
			if l.Leader != a || l.Term != 1 {
				t.Fatalf("Elect after migrate.Up: %+v", l)
			}
			ids, err := e.ListCandidates(ctx)
			must(t, "ListCandidates", err)
			if len(ids) != 1 || ids[0] != a {
				t.Fatalf("ListCandidates after migrate.Up: %v", ids)
			}
		})
	}
}

// TestPreparedStatementHandles: a handle opened with GORM's PrepareStmt works
// like any other, also for a caller's transaction, and before migrate.Up
// calls return ErrNotMigrated. (GORM's prepared-statement pool answers a
// failed prepare with an empty *sql.Row whose Scan panics.)
func TestPreparedStatementHandles(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			prepared := &gorm.Config{PrepareStmt: true, Logger: logger.Discard}
			dsn, _ := testdb.Shared(t, tg)
			db, err := session.Open(dsn, prepared)
			must(t, "session.Open with PrepareStmt", err)
			t.Cleanup(func() { testdb.Close(db) })
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns)
			a, b := uuid.New(), uuid.New()
			la := mustElect(t, e, a)
			wantLease(t, "Elect", la, ns, a, 1)
			sameLease(t, "renewal", mustElect(t, e, a), mustLeader(t, e))
			tx := db.Begin()
			must(t, "Begin", tx.Error)
			must(t, "Guard WithTx", e.Guard(ctx, la, election.WithTx(tx)))
			must(t, "Resign WithTx", e.Resign(ctx, a, election.WithTx(tx)))
			lb, err := e.Elect(ctx, b, election.WithTx(tx))
			must(t, "Elect WithTx", err)
			must(t, "Commit", tx.Commit().Error)
			wantLease(t, "Elect WithTx", lb, ns, b, 2)
			sameLease(t, "Leader", mustLeader(t, e), lb)

			fresh, err := session.Open(testdb.Fresh(t, tg), prepared)
			must(t, "session.Open of an empty database with PrepareStmt", err)
			t.Cleanup(func() { testdb.Close(fresh) })
			ef := mustElection(t, fresh, ns)
			_, err = ef.Elect(ctx, a)
			if !errors.Is(err, election.ErrNotMigrated) {
				t.Fatalf("Elect before migrate.Up: %v, want ErrNotMigrated", err)
			}
			if _, err := ef.Leader(ctx); !errors.Is(err, election.ErrNotMigrated) {
				t.Fatalf("Leader before migrate.Up: %v, want ErrNotMigrated", err)
			}
			ftx := fresh.Begin()
			must(t, "Begin", ftx.Error)
			_, err = ef.IsLeader(ctx, a, election.WithTx(ftx))
			ftx.Rollback()
			if !errors.Is(err, election.ErrNotMigrated) {
				t.Fatalf("IsLeader WithTx before migrate.Up: %v, want ErrNotMigrated", err)
			}
		})
	}
}

// TestNewContext: NewContext checks the database under the caller's
// context, refuses a nil one, and gives up when it has ended.
func TestNewContext(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e, err := election.NewContext(testCtx(t), db, election.WithNamespace(ns), election.WithLogger(quiet))
			if err != nil {
				t.Fatalf("NewContext: %v", err)
			}
			id := uuid.New()
			if l := mustElect(t, e, id); !l.HeldBy(id) {
				t.Fatalf("Elect on an Election from NewContext: %+v", l)
			}
			//lint:ignore SA1012 a nil context is the misuse under test
			if _, err := election.NewContext(nil, db); !errors.Is(err, election.ErrInvalidOption) {
				t.Errorf("NewContext(nil, db) = %v, want ErrInvalidOption", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := election.NewContext(ctx, db); !errors.Is(err, context.Canceled) {
				t.Errorf("NewContext(cancelled) = %v, want context.Canceled", err)
			}
			short, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel()
			if _, err := election.NewContext(short, db); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("NewContext(past deadline) = %v, want context.DeadlineExceeded", err)
			}
		})
	}
}
