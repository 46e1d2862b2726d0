package dialect_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

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
			d := mustDialect(t, tg.Name)
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
			d := mustDialect(t, tg.Name)
			db := testdb.Open(t, tg)
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
	raw, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "busy.db")+"?_busy_timeout=0&_journal_mode=WAL")
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
			d := mustDialect(t, tg.Name)
			raw := testdb.Raw(t, testdb.Open(t, tg))
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
