package dialect_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestMain fails the package on leaked goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestTimeScan: Time reads every form drivers return timestamps in, as UTC.
func TestTimeScan(t *testing.T) {
	ist := time.FixedZone("IST", 5*3600+1800)
	want := time.Date(2024, 2, 29, 13, 4, 5, 123456000, time.UTC)
	for _, c := range []struct {
		name string
		src  any
		want dialect.Time
	}{
		{"nil", nil, dialect.Time{}},
		{"time.Time UTC", want, dialect.Time{Time: want, Valid: true}},
		{"time.Time in another zone", want.In(ist), dialect.Time{Time: want, Valid: true}},
		{"sqlite text", "2024-02-29 13:04:05.123456", dialect.Time{Time: want, Valid: true}},
		{"sqlite text as bytes", []byte("2024-02-29 13:04:05.123456"), dialect.Time{Time: want, Valid: true}},
		{"T separator", "2024-02-29T13:04:05.123456", dialect.Time{Time: want, Valid: true}},
		{"Z suffix", "2024-02-29T13:04:05.123456Z", dialect.Time{Time: want, Valid: true}},
		{"offset", "2024-02-29 18:34:05.123456+05:30", dialect.Time{Time: want, Valid: true}},
		{"T and offset", "2024-02-29T18:34:05.123456+05:30", dialect.Time{Time: want, Valid: true}},
		{"mysql text without fraction", "2024-02-29 13:04:05", dialect.Time{Time: want.Truncate(time.Second), Valid: true}},
		{"nanoseconds", "2024-02-29 13:04:05.123456789", dialect.Time{Time: want.Add(789), Valid: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got dialect.Time
			if err := got.Scan(c.src); err != nil {
				t.Fatalf("Scan(%v): %v", c.src, err)
			}
			if got.Valid != c.want.Valid || !got.Time.Equal(c.want.Time) {
				t.Fatalf("Scan(%v) = %+v, want %+v", c.src, got, c.want)
			}
			if got.Valid && got.Time.Location() != time.UTC {
				t.Fatalf("Scan(%v) is in %v, want UTC", c.src, got.Time.Location())
			}
		})
	}
	// The text MariaDB returns (and a zone in UTC), parsed with the layout
	// its shape names: no failed parse before the right one (each
	// allocated its error: 7 and 16 allocations where 2 remain, the
	// text's copy and the Time).
	for _, text := range []string{"2024-02-29 13:04:05.123456", "2024-02-29T13:04:05.123456Z"} {
		src := []byte(text)
		if n := testing.AllocsPerRun(100, func() {
			var got dialect.Time
			if err := got.Scan(src); err != nil {
				t.Fatal(err)
			}
		}); n > 2 {
			t.Errorf("Scan(%q) allocated %v times, want at most 2", text, n)
		}
	}
	for _, bad := range []any{"yesterday", "2024-13-01 00:00:00", 42, 3.5, true} {
		var got dialect.Time
		if err := got.Scan(bad); err == nil {
			t.Errorf("Scan(%v) succeeded: %+v", bad, got)
		}
	}
}

func mustDialect(t *testing.T, name string) dialect.Dialect {
	t.Helper()
	d, err := dialect.ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// detected is db's dialect as an Election sees it: chosen by the GORM
// dialector's name, then refined by asking the server (TiDB).
func detected(t *testing.T, db *gorm.DB) dialect.Dialect {
	t.Helper()
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	if d, err = dialect.Detect(context.Background(), db, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRebind: ? markers become $n on PostgreSQL only.
func TestRebind(t *testing.T) {
	q := "SELECT a FROM t WHERE x = ? AND y IN (?, ?)"
	for name, want := range map[string]string{
		"postgres": "SELECT a FROM t WHERE x = $1 AND y IN ($2, $3)",
		"mysql":    q,
		"sqlite":   q,
	} {
		if got := mustDialect(t, name).Rebind(q); got != want {
			t.Errorf("%s: Rebind = %q, want %q", name, got, want)
		}
	}
	if got := mustDialect(t, "postgres").Rebind("SELECT 1"); got != "SELECT 1" {
		t.Errorf("Rebind without markers = %q", got)
	}
}

// TestByName: the dialects by GORM dialector name.
func TestByName(t *testing.T) {
	for name, want := range map[string]string{"postgres": "postgres", "mysql": "mysql", "sqlite": "sqlite", "sqlite3": "sqlite"} {
		if got := mustDialect(t, name).Name(); got != want {
			t.Errorf("ByName(%q).Name() = %q, want %q", name, got, want)
		}
	}
	if _, err := dialect.ByName("oracle"); err == nil {
		t.Error("ByName(oracle) succeeded")
	}
}

// TestClock reads the database clock and the clock plus a duration, as
// bound through DurationArg, on every database.
func TestClock(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			d := detected(t, db)
			raw := testdb.Raw(t, db)
			for _, delta := range []time.Duration{time.Second, -1500 * time.Millisecond, 250 * time.Millisecond} {
				var now, later dialect.Time
				q := dialect.ClockPlus(d)
				if err := raw.QueryRow(q, d.DurationArg(delta)).Scan(&now, &later); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				if !now.Valid || !later.Valid {
					t.Fatalf("NULL clock: %+v %+v", now, later)
				}
				if got := later.Time.Sub(now.Time); got < delta-time.Millisecond || got > delta+100*time.Millisecond {
					t.Errorf("now plus %v - now = %v", delta, got)
				}
				if off := time.Since(now.Time); off < -time.Minute || off > time.Minute {
					t.Errorf("the database clock %v is %v from this host's: not UTC?", now.Time, off)
				}
			}
		})
	}
}

// scratch creates a table with two rows of the test's own and drops it when
// the test ends.
func scratch(t *testing.T, raw *sql.DB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "dialect_t_" + hex.EncodeToString(b[:])
	for _, q := range []string{
		"CREATE TABLE " + name + " (id INTEGER NOT NULL PRIMARY KEY, v INTEGER NOT NULL)",
		"INSERT INTO " + name + " (id, v) VALUES (1, 0), (2, 0)",
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { raw.Exec("DROP TABLE " + name) })
	return name
}

// TestClassify sorts real errors from every database.
func TestClassify(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			d := detected(t, db)
			raw := testdb.Raw(t, db)
			table := scratch(t, raw)
			if got := d.Classify(nil); got != dialect.Other {
				t.Errorf("Classify(nil) = %v", got)
			}
			if got := d.Classify(errors.New("something")); got != dialect.Other {
				t.Errorf("Classify(plain error) = %v", got)
			}
			// A duplicate key is not a conflict worth retrying: the
			// protocol's inserts that may collide skip duplicates instead.
			_, err := raw.Exec("INSERT INTO " + table + " (id, v) VALUES (1, 0)")
			if err == nil {
				t.Fatal("a duplicate primary key was inserted")
			}
			if got := d.Classify(err); got != dialect.Other {
				t.Errorf("Classify(%v) = %v, want Other", err, got)
			}
			if got := d.Classify(fmt.Errorf("wrapped: %w", err)); got != dialect.Other {
				t.Errorf("Classify(wrapped duplicate) = %v, want Other", got)
			}
			_, err = raw.Exec("SELECT * FROM " + table + "_missing")
			if got := d.Classify(fmt.Errorf("wrapped: %w", err)); got != dialect.MissingTable {
				t.Errorf("Classify(wrapped missing table) = %v, want MissingTable", got)
			}
			_, err = raw.Exec("SELECT * FROM " + table + "_missing")
			if got := d.Classify(err); got != dialect.MissingTable {
				t.Errorf("Classify(%v) = %v, want MissingTable", err, got)
			}
			_, err = raw.Exec("SELEKT 1")
			if got := d.Classify(err); got != dialect.Other {
				t.Errorf("Classify(%v) = %v, want Other", err, got)
			}
			if tg.Name == "sqlite" {
				busy(t, d)
			} else {
				deadlock(t, d, raw, table)
			}
		})
	}
}

// deadlock provokes a deadlock between two transactions and checks that
// the victim's error is Transient.
func deadlock(t *testing.T, d dialect.Dialect, raw *sql.DB, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	update := func(tx *sql.Tx, id int) error {
		_, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = %d", table, id))
		return err
	}
	tx1, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	tx2, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if err := update(tx1, 1); err != nil {
		t.Fatal(err)
	}
	if err := update(tx2, 2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[0] = update(tx1, 2)
		if errs[0] != nil {
			tx1.Rollback()
		}
	}()
	errs[1] = update(tx2, 1)
	if errs[1] != nil {
		tx2.Rollback()
	}
	wg.Wait()
	victims := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		victims++
		if got := d.Classify(err); got != dialect.Transient {
			t.Errorf("Classify(%v) = %v, want Transient", err, got)
		}
	}
	if victims == 0 {
		t.Fatal("no deadlock was detected")
	}
}

// busy makes a second writer fail at once on a SQLite file locked by a
// first one and checks the error is Transient.
func busy(t *testing.T, d dialect.Dialect) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Opened directly: session.Open refuses a zero busy timeout.
	raw, err := dialect.OpenSQLiteRaw("sqlite:" + filepath.Join(t.TempDir(), "busy.db") + "?_busy_timeout=0&_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c1, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c1.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer c1.ExecContext(context.Background(), "ROLLBACK")
	_, err = c2.ExecContext(ctx, "BEGIN IMMEDIATE")
	if err == nil {
		c2.ExecContext(ctx, "ROLLBACK")
		t.Fatal("a second writer began while the first held the lock")
	}
	if got := d.Classify(err); got != dialect.Transient {
		t.Errorf("Classify(%v) = %v, want Transient", err, got)
	}
}

// TestSelectLeaderShape: every dialect's leader query yields one row, also
// for a namespace without a leader row: the clock and NULL leader columns,
// except that with UpdateLock a dialect without row locks may create the
// row vacant with term 0.
func TestSelectLeaderShape(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			d := detected(t, db)
			raw := testdb.Raw(t, db)
			for _, lock := range []dialect.Lock{dialect.NoLock, dialect.ShareLock, dialect.UpdateLock} {
				tx, err := raw.Begin()
				if err != nil {
					t.Fatal(err)
				}
				var (
					now, exp, acq dialect.Time
					leader        sql.NullString
					term          sql.NullInt64
				)
				err = tx.QueryRow(d.Statements().SelectLeader[lock], testdb.Namespace(t)).Scan(&now, &leader, &term, &exp, &acq)
				tx.Rollback()
				if err != nil {
					t.Fatalf("lock %d: %v", lock, err)
				}
				got := []bool{now.Valid, leader.Valid, term.Valid, exp.Valid, acq.Valid}
				if lock == dialect.UpdateLock && term.Valid && term.Int64 == 0 {
					got[2] = false
				}
				if want := []bool{true, false, false, false, false}; !cmp.Equal(got, want) {
					t.Fatalf("lock %d: valid columns %v, want only the clock: %+v %+v %+v %+v %+v", lock, got, now, leader, term, exp, acq)
				}
			}
		})
	}
}

// TestTiDBPieces: on TiDB the guard's shared lock is an exclusive one (a
// shared lock there is a no-op or refused), every derived table reading the
// clock is evaluated once (LIMIT 1), and TiDB's retryable errors are
// contention; MySQL and MariaDB keep LOCK IN SHARE MODE.
func TestTiDBPieces(t *testing.T) {
	my := dialect.MySQLForTest(false).Statements()
	ti := dialect.MySQLForTest(true).Statements()
	if !strings.HasSuffix(my.SelectLeader[dialect.ShareLock], "LOCK IN SHARE MODE") {
		t.Errorf("MySQL guard: %s", my.SelectLeader[dialect.ShareLock])
	}
	if got := ti.SelectLeader[dialect.ShareLock]; !strings.HasSuffix(got, "FOR UPDATE") {
		t.Errorf("TiDB guard: %s, want FOR UPDATE", got)
	}
	if ti.SelectLeader[dialect.NoLock] != my.SelectLeader[dialect.NoLock] || ti.SelectLeader[dialect.UpdateLock] != my.SelectLeader[dialect.UpdateLock] {
		t.Error("TiDB's unlocked or FOR UPDATE reads differ from MySQL's")
	}
	for _, q := range []string{ti.UpsertNow, ti.Candidates} {
		if !strings.Contains(q, "AS n LIMIT 1) t") {
			t.Errorf("the clock's derived table is not LIMIT 1: %s", q)
		}
	}
	d := dialect.MySQLForTest(true)
	for _, n := range []uint16{9007, 8022, 8028, 9001, 9006, 1213} {
		if got := d.Classify(&drv.MySQLError{Number: n}); got != dialect.Transient {
			t.Errorf("error %d: class %v, want Transient", n, got)
		}
	}
	if !dialect.TiDB(d) || dialect.TiDB(dialect.MySQLForTest(false)) {
		t.Error("TiDB() does not tell the two apart")
	}
}

// TestGaleraDetect: Detect finds a Galera node by wsrep_on, on every node
// of the cluster, and a stand-alone MySQL or MariaDB server is not one.
func TestGaleraDetect(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "mysql" {
			continue
		}
		db := testdb.OpenDSN(t, tg.DSN)
		var wsrep sql.NullString
		rows, err := db.Raw("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'").Rows()
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name, &wsrep); err != nil {
				t.Fatal(err)
			}
		}
		rows.Close()
		if got, want := dialect.Galera(detected(t, db)), strings.EqualFold(wsrep.String, "ON"); got != want {
			t.Errorf("%s (wsrep_on %q): Galera = %v, want %v", tg.DSN, wsrep.String, got, want)
		}
	}
	for _, dsn := range testdb.Galera(t) {
		if d := detected(t, testdb.OpenDSN(t, dsn)); !dialect.Galera(d) || dialect.TiDB(d) {
			t.Errorf("%s: Galera = %v, TiDB = %v; want a Galera node", dsn, dialect.Galera(d), dialect.TiDB(d))
		}
	}
}
