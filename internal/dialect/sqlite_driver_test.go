package dialect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// eachSQLiteDriver runs fn once per SQLite driver this test binary can
// use: modernc.org/sqlite always, mattn/go-sqlite3 with cgo.
func eachSQLiteDriver(t *testing.T, fn func(t *testing.T, driver string)) {
	t.Helper()
	for _, drv := range []string{dialect.SQLiteMattn, dialect.SQLiteModernc} {
		t.Run(drv, func(t *testing.T) {
			if drv == dialect.SQLiteMattn && !dialect.CgoEnabled {
				t.Skip("mattn/go-sqlite3 needs cgo")
			}
			fn(t, drv)
		})
	}
}

// rawSQLite opens a bare pool on dsn and closes it when the test ends.
func rawSQLite(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := dialect.OpenSQLiteRaw(dsn)
	if err != nil {
		t.Fatalf("opening %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// pragma reads a PRAGMA's value as text.
func pragma(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRow("PRAGMA " + name).Scan(&v); err != nil {
		t.Fatalf("PRAGMA %s: %v", name, err)
	}
	return v
}

// TestSQLiteDriverSettings: whichever driver a DSN names, Open gives a pool
// on that driver in WAL mode, synchronous=NORMAL, with a 5 s busy timeout,
// and settings written in either driver's parameters mean the same on both.
func TestSQLiteDriverSettings(t *testing.T) {
	eachSQLiteDriver(t, func(t *testing.T, drv string) {
		dir := t.TempDir()
		db := rawSQLite(t, "sqlite:"+filepath.Join(dir, "a.db")+"?driver="+drv)
		if got := dialect.SQLiteDriverName(db); got != drv {
			t.Fatalf("driver=%s opened a pool on %q", drv, got)
		}
		if got := pragma(t, db, "journal_mode"); got != "wal" {
			t.Errorf("journal_mode %s, want wal", got)
		}
		if got := pragma(t, db, "busy_timeout"); got != "5000" {
			t.Errorf("busy_timeout %s, want 5000", got)
		}
		if got := pragma(t, db, "synchronous"); got != "1" {
			t.Errorf("synchronous %s, want 1 (NORMAL, mattn/go-sqlite3's default in WAL mode)", got)
		}
		if d, err := dialect.ForDriver(db.Driver()); err != nil || d.Name() != "sqlite" {
			t.Errorf("ForDriver(%T) = %v, %v; want the sqlite dialect", db.Driver(), d, err)
		}
		// mattn/go-sqlite3's own parameters, on either driver.
		db = rawSQLite(t, "sqlite:"+filepath.Join(dir, "b.db")+"?driver="+drv+"&_busy_timeout=1234&_foreign_keys=1&_journal_mode=DELETE")
		if got := pragma(t, db, "busy_timeout"); got != "1234" {
			t.Errorf("_busy_timeout=1234 gave busy_timeout %s", got)
		}
		if got := pragma(t, db, "foreign_keys"); got != "1" {
			t.Errorf("_foreign_keys=1 gave foreign_keys %s", got)
		}
		if got := pragma(t, db, "journal_mode"); got != "delete" {
			t.Errorf("_journal_mode=DELETE gave journal_mode %s", got)
		}
		if got := pragma(t, db, "synchronous"); got != "1" {
			t.Errorf("synchronous %s with a rollback journal, want 1 (NORMAL, mattn/go-sqlite3's default)", got)
		}
		db = rawSQLite(t, "sqlite:"+filepath.Join(dir, "c.db")+"?driver="+drv+"&_synchronous=FULL")
		if got := pragma(t, db, "synchronous"); got != "2" {
			t.Errorf("_synchronous=FULL gave synchronous %s", got)
		}
		// In memory: one database shared by the pool's connections.
		db = rawSQLite(t, "sqlite::memory:?driver="+drv)
		db.SetMaxOpenConns(4)
		ctx := context.Background()
		c1, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		if _, err := c1.ExecContext(ctx, "CREATE TABLE shared (x INTEGER)"); err != nil {
			t.Fatal(err)
		}
		c2, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if _, err := c2.ExecContext(ctx, "INSERT INTO shared VALUES (1)"); err != nil {
			t.Errorf("a second connection to sqlite::memory: does not see the first one's table: %v", err)
		}
	})
}

// TestSQLiteDriverModerncParams: modernc.org/sqlite's own parameters pass
// through, and a DSN that asks for something modernc cannot do, or names no
// known driver, is refused with ErrDSN instead of being ignored.
func TestSQLiteDriverModerncParams(t *testing.T) {
	dir := t.TempDir()
	db := rawSQLite(t, "sqlite:"+filepath.Join(dir, "p.db")+"?driver=modernc&_pragma=busy_timeout(777)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_loc=UTC")
	if got := pragma(t, db, "busy_timeout"); got != "777" {
		t.Errorf("_pragma=busy_timeout(777) gave busy_timeout %s", got)
	}
	if got := pragma(t, db, "synchronous"); got != "2" {
		t.Errorf("_pragma=synchronous(FULL) gave synchronous %s", got)
	}
	for _, dsn := range []string{
		"sqlite:x.db?driver=modernc&_auth=1",                 // mattn's user authentication: no counterpart
		"sqlite:x.db?driver=modernc&_loc=auto",               // mattn's local-time parsing: no counterpart
		"sqlite:x.db?driver=modernc&_busy_timeout=1;DROP",    // not a value
		"sqlite:x.db?driver=odbc",                            // no such driver
		"sqlite:x.db?driver=mattn&driver=modernc",            // two drivers
		"sqlite:?driver=modernc",                             // no path
		"sqlite:x.db?driver=modernc&_journal_mode=WAL%29%3B", // a value that would close the PRAGMA
	} {
		_, err := dialect.Open(dsn)
		if !errors.Is(err, dialect.ErrDSN) {
			t.Errorf("Open(%s) = %v, want ErrDSN", dsn, err)
		}
	}
}

// TestSQLiteDriverImmediate: a transaction begun on an Open pool (as the
// library begins its own) takes the write lock at BEGIN, on either driver,
// so that another writer waits for it instead of failing later; with
// _txlock=deferred, the negative control, it does not.
func TestSQLiteDriverImmediate(t *testing.T) {
	eachSQLiteDriver(t, func(t *testing.T, drv string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		path := filepath.Join(t.TempDir(), "i.db")
		other := rawSQLite(t, "sqlite:"+path+"?driver="+drv+"&_busy_timeout=0")
		if _, err := other.ExecContext(ctx, "CREATE TABLE t (x INTEGER)"); err != nil {
			t.Fatal(err)
		}
		d, err := dialect.ByName("sqlite")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			params     string
			holdsWrite bool
		}{{"", true}, {"&_txlock=deferred", false}} {
			db := rawSQLite(t, "sqlite:"+path+"?driver="+drv+c.params)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, werr := other.ExecContext(ctx, "INSERT INTO t VALUES (1)")
			tx.Rollback()
			switch {
			case c.holdsWrite && werr == nil:
				t.Errorf("driver=%s%s: another connection wrote while a transaction was open: BEGIN was not IMMEDIATE", drv, c.params)
			case c.holdsWrite && d.Classify(werr) != dialect.Transient:
				t.Errorf("driver=%s%s: the other writer got %v, want a Transient (busy) error", drv, c.params, werr)
			case !c.holdsWrite && werr != nil:
				t.Errorf("driver=%s%s: a deferred transaction kept another writer out: %v", drv, c.params, werr)
			}
		}
	})
}

// TestSQLiteDriverTimes: the database clock and the timestamps the library
// writes (TimeArg) read back in UTC at microsecond precision on either
// driver, and a time.Time bound as an argument is written as the same text
// by both drivers, so that rows written through one compare correctly with
// rows written through the other.
func TestSQLiteDriverTimes(t *testing.T) {
	want := time.Date(2024, 2, 29, 13, 4, 5, 123456789, time.FixedZone("IST", 5*3600+1800))
	bound := map[string]string{}
	eachSQLiteDriver(t, func(t *testing.T, drv string) {
		db := rawSQLite(t, "sqlite:"+filepath.Join(t.TempDir(), "t.db")+"?driver="+drv)
		d, err := dialect.ByName("sqlite")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE t (at DATETIME, raw DATETIME)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO t VALUES (?, ?)", d.TimeArg(want), want); err != nil {
			t.Fatal(err)
		}
		var at dialect.Time
		var text string
		if err := db.QueryRow("SELECT at, CAST(raw AS TEXT) FROM t").Scan(&at, &text); err != nil {
			t.Fatal(err)
		}
		if !at.Valid || !at.Time.Equal(want.Truncate(time.Microsecond)) || at.Time.Location() != time.UTC {
			t.Errorf("TimeArg read back as %v, want %v in UTC", at.Time, want.Truncate(time.Microsecond).UTC())
		}
		bound[drv] = text
		var (
			nowText string
			now     dialect.Time
			plus    dialect.Time
		)
		if err := db.QueryRow(dialect.ClockPlus(d), d.DurationArg(time.Second)).Scan(&nowText, &plus); err != nil {
			t.Fatal(err)
		}
		if err := now.Scan(nowText); err != nil {
			t.Fatal(err)
		}
		if len(nowText) != len("2006-01-02 15:04:05.000000") || time.Since(now.Time).Abs() > time.Minute ||
			plus.Time.Sub(now.Time) != time.Second {
			t.Errorf("the database clock reads %q (%v), and a second later %v", nowText, now.Time, plus.Time)
		}
	})
	// Each driver is a subtest, which -run may leave out.
	m, mok := bound[dialect.SQLiteMattn]
	got, ok := bound[dialect.SQLiteModernc]
	if mok && ok && m != got {
		t.Errorf("a bound time.Time is written as %q by mattn and %q by modernc", m, got)
	}
	if wantText := "2024-02-29 13:04:05.123456789+05:30"; ok && got != wantText {
		t.Errorf("modernc writes a bound time.Time as %q, want %q (mattn's form)", got, wantText)
	}
}

// TestSQLiteDriverClassify: each driver's errors are sorted alike: busy and
// locked are Transient, a missing table or column MissingTable, a write to a
// read-only database ReadOnly, and anything else Other.
func TestSQLiteDriverClassify(t *testing.T) {
	eachSQLiteDriver(t, func(t *testing.T, drv string) {
		d, err := dialect.ByName("sqlite")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "c.db")
		db := rawSQLite(t, "sqlite:"+path+"?driver="+drv)
		if _, err := db.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			stmt string
			want dialect.Class
		}{
			{"SELECT * FROM missing", dialect.MissingTable},
			{"SELECT y FROM t", dialect.MissingTable},
			{"INSERT INTO t (y) VALUES (1)", dialect.MissingTable},
			{"SELEKT 1", dialect.Other},
		} {
			_, err := db.Exec(c.stmt)
			if got := d.Classify(err); err == nil || got != c.want {
				t.Errorf("%s: Classify(%v) = %v, want %v", c.stmt, err, got, c.want)
			}
			if got := d.Classify(fmt.Errorf("wrapped: %w", err)); got != c.want {
				t.Errorf("%s: Classify(wrapped) = %v, want %v", c.stmt, got, c.want)
			}
		}
		ro := rawSQLite(t, "sqlite:"+path+"?driver="+drv+"&mode=ro")
		_, err = ro.Exec("INSERT INTO t VALUES (1)")
		if got := d.Classify(err); err == nil || got != dialect.ReadOnly {
			t.Errorf("a write on a read-only connection: Classify(%v) = %v, want ReadOnly", err, got)
		}
		if err != nil && !dialect.Discard(d, err) {
			t.Errorf("a connection that answered read-only is not discarded")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c1, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		if _, err := c1.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		defer c1.ExecContext(context.Background(), "ROLLBACK")
		busy := rawSQLite(t, "sqlite:"+path+"?driver="+drv+"&_busy_timeout=0")
		_, err = busy.Exec("INSERT INTO t VALUES (1)")
		if got := d.Classify(err); err == nil || got != dialect.Transient {
			t.Errorf("a write while another connection holds the lock: Classify(%v) = %v, want Transient", err, got)
		}
	})
}

// TestSQLiteDriverCheck: the settings check (election.New's) accepts a pool
// that Open made on either driver and refuses a plain one opened without
// WAL or without a busy timeout, naming the parameter to add in the form
// of the handle's own driver.
func TestSQLiteDriverCheck(t *testing.T) {
	hints := map[string][2]string{
		dialect.SQLiteMattn:   {"_journal_mode=WAL", "_busy_timeout=5000"},
		dialect.SQLiteModernc: {"_pragma=journal_mode(WAL)", "_pragma=busy_timeout(5000)"},
	}
	names := map[string]string{dialect.SQLiteMattn: "sqlite3", dialect.SQLiteModernc: "sqlite"}
	eachSQLiteDriver(t, func(t *testing.T, drv string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d, err := dialect.ByName("sqlite")
		if err != nil {
			t.Fatal(err)
		}
		check := func(pool *sql.DB) error {
			db, err := gorm.Open(d.Gorm(pool), &gorm.Config{Logger: logger.Discard})
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.Check(ctx, db)
			return err
		}
		dir := t.TempDir()
		if err := check(rawSQLite(t, "sqlite:"+filepath.Join(dir, "ok.db")+"?driver="+drv)); err != nil {
			t.Errorf("Check of an Open pool: %v", err)
		}
		plain := func(dsn string) *sql.DB {
			pool, err := sql.Open(names[drv], dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pool.Close() })
			return pool
		}
		busyOff := map[string]string{dialect.SQLiteMattn: "?_journal_mode=WAL&_busy_timeout=0", dialect.SQLiteModernc: "?_pragma=journal_mode(WAL)"}
		for i, dsn := range []string{filepath.Join(dir, "rollback.db"), filepath.Join(dir, "nobusy.db") + busyOff[drv]} {
			err := check(plain(dsn))
			if !errors.Is(err, dialect.ErrUnsafeSettings) || !strings.Contains(err.Error(), hints[drv][i]) {
				t.Errorf("Check of %s: %v, want ErrUnsafeSettings naming %s", dsn, err, hints[drv][i])
			}
		}
		// The GORM dialector a modernc user would open with names itself
		// sqlite, so the dialect is the same.
		db, err := gorm.Open(gormsqlite.Dialector{DriverName: names[drv], DSN: filepath.Join(dir, "g.db")}, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if pool, err := db.DB(); err == nil {
				pool.Close()
			}
		}()
		if got, err := dialect.For(db); err != nil || got.Name() != "sqlite" {
			t.Errorf("For(a %s handle) = %v, %v", drv, got, err)
		}
	})
}

// TestSQLiteDriverOneFileOneDriver: a process that opened a SQLite file
// through one driver is refused the other on the same file (also by
// another name for it), since two copies of SQLite in one process would
// not see each other's locks; the same driver, and another file, are fine.
func TestSQLiteDriverOneFileOneDriver(t *testing.T) {
	if !dialect.CgoEnabled {
		t.Skip("mattn/go-sqlite3 needs cgo")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "one.db")
	rawSQLite(t, "sqlite:"+path+"?driver=mattn")
	rawSQLite(t, "file:"+path+"?driver=mattn&_busy_timeout=100")
	for _, dsn := range []string{"sqlite:" + path + "?driver=modernc", "sqlite:" + filepath.Join(dir, ".", "x", "..", "one.db") + "?driver=modernc"} {
		_, err := dialect.Open(dsn)
		if !errors.Is(err, dialect.ErrDSN) || !strings.Contains(err.Error(), "driver=mattn") {
			t.Errorf("Open(%s) after driver=mattn on the same file = %v, want ErrDSN naming driver=mattn", dsn, err)
		}
	}
	rawSQLite(t, "sqlite:"+filepath.Join(dir, "two.db")+"?driver=modernc")
	rawSQLite(t, "sqlite::memory:?driver=modernc")
}
