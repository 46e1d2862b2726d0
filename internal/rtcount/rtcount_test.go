package rtcount_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dsnFor is target's DSN; for SQLite a new file in the test's directory.
func dsnFor(t *testing.T, tg testdb.Target) string {
	t.Helper()
	if tg.Name == "sqlite" {
		return "sqlite:" + filepath.Join(t.TempDir(), "rt.db")
	}
	return tg.DSN
}

// open opens dsn through session.OpenWrapped, counting on c, with one
// connection so that every call runs on the same one.
func open(t *testing.T, dsn string, c *rtcount.Counter) (*gorm.DB, *sql.DB) {
	t.Helper()
	var wraps atomic.Int32
	db, err := session.OpenWrapped(dsn, func(inner driver.Connector) driver.Connector {
		wraps.Add(1)
		return c.Wrap(inner)
	})
	if err != nil {
		t.Fatalf("OpenWrapped: %v", err)
	}
	if n := wraps.Load(); n != 1 {
		t.Errorf("wrap was called %d times, want 1", n)
	}
	sqlDB := testdb.Raw(t, db)
	t.Cleanup(func() { sqlDB.Close() })
	sqlDB.SetMaxOpenConns(1)
	return db, sqlDB
}

// marker is the placeholder of the first argument on target's database.
func marker(tg testdb.Target) string {
	if tg.Name == "postgres" {
		return "$1"
	}
	return "?"
}

// TestRoundTripCounts checks that each kind of call is counted once, and
// nothing else is, on every database.
func TestRoundTripCounts(t *testing.T) {
	ctx := context.Background()
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			var c rtcount.Counter
			_, sqlDB := open(t, dsnFor(t, tg), &c)
			if _, err := sqlDB.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS rtcount_t (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			m := marker(tg)
			steps := []struct {
				name string
				run  func() error
				want rtcount.Kind
				n    int64
			}{
				{"exec", func() error {
					_, err := sqlDB.ExecContext(ctx, "UPDATE rtcount_t SET n = n + 1 WHERE id = "+m, 1)
					return err
				}, rtcount.Exec, 1},
				{"query", func() error {
					var n int64
					return sqlDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM rtcount_t WHERE id = "+m, 1).Scan(&n)
				}, rtcount.Query, 1},
				{"ping", func() error { return sqlDB.PingContext(ctx) }, rtcount.Ping, 1},
			}
			for _, s := range steps {
				before := c.Snapshot()
				if err := s.run(); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				var want rtcount.Counts
				want[s.want] = s.n
				if got := c.Snapshot().Sub(before); got != want {
					t.Errorf("%s counted %v, want %v", s.name, got, want)
				}
			}

			before := c.Snapshot()
			stmt, err := sqlDB.PrepareContext(ctx, "SELECT COUNT(*) FROM rtcount_t WHERE id = "+m)
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := stmt.QueryRowContext(ctx, 1).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if err := stmt.QueryRowContext(ctx, 2).Scan(&n); err != nil {
				t.Fatal(err)
			}
			stmt.Close()
			upd, err := sqlDB.PrepareContext(ctx, "UPDATE rtcount_t SET n = n + 1 WHERE id = "+m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := upd.ExecContext(ctx, 1); err != nil {
				t.Fatal(err)
			}
			upd.Close()
			var want rtcount.Counts
			want[rtcount.Prepare], want[rtcount.StmtQuery], want[rtcount.StmtExec] = 2, 2, 1
			if got := c.Snapshot().Sub(before); got != want {
				t.Errorf("prepared statements counted %v, want %v", got, want)
			}

			before = c.Snapshot()
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE rtcount_t SET n = n + 1 WHERE id = "+m, 1); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			tx, err = sqlDB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			want = rtcount.Counts{}
			want[rtcount.Begin], want[rtcount.Exec], want[rtcount.Commit], want[rtcount.Rollback] = 2, 1, 1, 1
			if got := c.Snapshot().Sub(before); got != want {
				t.Errorf("transactions counted %v, want %v", got, want)
			}
			if got, want := c.Snapshot().Sub(before).String(), "begin=2 exec=1 commit=1 rollback=1"; got != want {
				t.Errorf("Counts.String() = %q, want %q", got, want)
			}

			c.Reset()
			if got := c.Total(); got != 0 {
				t.Errorf("Total after Reset = %d, want 0", got)
			}
		})
	}
}

// TestRoundTripObserve checks that Observe sees every counted call with its
// text.
func TestRoundTripObserve(t *testing.T) {
	var (
		seen []string
		c    rtcount.Counter
	)
	c.Observe = func(k rtcount.Kind, q string) { seen = append(seen, k.String()+":"+q) }
	_, sqlDB := open(t, dsnFor(t, testdb.Target{Name: "sqlite"}), &c)
	seen = nil
	if _, err := sqlDB.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"exec:SELECT 1"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("observed %q, want %q", seen, want)
	}
}

// TestRoundTripSkipIsNotCounted runs statements with arguments on MySQL without
// client-side interpolation: the driver declines ExecContext with
// driver.ErrSkip and database/sql prepares and executes instead, which is what
// must be counted.
func TestRoundTripSkipIsNotCounted(t *testing.T) {
	var tg testdb.Target
	for _, x := range testdb.Targets(t) {
		if x.Name == "mysql" {
			tg = x
		}
	}
	if tg.Name == "" {
		t.Skip(testdb.MySQLEnv + " is not set")
	}
	var c rtcount.Counter
	// The driver's own form, without interpolateParams.
	dsn := strings.TrimPrefix(tg.DSN, "mysql://")
	plain, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	db := sql.OpenDB(c.Wrap(connectorOf(t, plain, dsn)))
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	before := c.Snapshot()
	var n int64
	if err := db.QueryRow("SELECT ? + 1", 41).Scan(&n); err != nil || n != 42 {
		t.Fatalf("SELECT ? + 1 = %d, %v", n, err)
	}
	var want rtcount.Counts
	want[rtcount.Prepare], want[rtcount.StmtQuery] = 1, 1
	if got := c.Snapshot().Sub(before); got != want {
		t.Errorf("counted %v, want %v", got, want)
	}
}

// connectorOf is the connector of db's driver for dsn.
func connectorOf(t *testing.T, db *sql.DB, dsn string) driver.Connector {
	t.Helper()
	dc, ok := db.Driver().(driver.DriverContext)
	if !ok {
		t.Fatalf("driver %T has no OpenConnector", db.Driver())
	}
	c, err := dc.OpenConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRoundTripInterfaces checks, through sql.Conn.Raw, that the wrapper hands
// over the driver's connection with Unwrap and answers the optional interfaces
// as the driver's connection does.
func TestRoundTripInterfaces(t *testing.T) {
	ctx := context.Background()
	wantConn := map[string]string{"postgres": "*stdlib.Conn", "mysql": "*mysql.mysqlConn", "sqlite": "*sqlite3.SQLiteConn"}
	if testdb.SQLiteDriver() == "modernc" {
		wantConn["sqlite"] = "*sqlite.conn"
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			var c rtcount.Counter
			db, sqlDB := open(t, dsnFor(t, tg), &c)
			if _, err := session.Wrap(sqlDB); err != nil {
				t.Errorf("session.Wrap on a wrapped pool: %v", err)
			}
			if db.Dialector.Name() != tg.Name {
				t.Errorf("dialector %q, want %q", db.Dialector.Name(), tg.Name)
			}
			conn, err := sqlDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			err = conn.Raw(func(dc any) error {
				u, ok := dc.(interface{ Unwrap() driver.Conn })
				if !ok {
					return fmt.Errorf("raw connection %T has no Unwrap", dc)
				}
				inner := u.Unwrap()
				if got := fmt.Sprintf("%T", inner); got != wantConn[tg.Name] {
					t.Errorf("Unwrap() is a %s, want %s", got, wantConn[tg.Name])
				}
				if v, ok := inner.(driver.Validator); ok {
					if got, want := dc.(driver.Validator).IsValid(), v.IsValid(); got != want {
						t.Errorf("IsValid() = %v, the driver says %v", got, want)
					}
				}
				r, hasReset := inner.(driver.SessionResetter)
				got := dc.(driver.SessionResetter).ResetSession(ctx)
				if hasReset {
					if want := r.ResetSession(ctx); !errors.Is(got, want) {
						t.Errorf("ResetSession() = %v, the driver says %v", got, want)
					}
				} else if got != nil {
					t.Errorf("ResetSession() = %v for a driver without it, want nil", got)
				}
				for _, v := range []any{int64(7), "x", time.Unix(0, 0), uint64(1 << 63), []int64{1}, struct{}{}} {
					nvGot := driver.NamedValue{Ordinal: 1, Value: v}
					errGot := dc.(driver.NamedValueChecker).CheckNamedValue(&nvGot)
					nvc, has := inner.(driver.NamedValueChecker)
					if !has {
						if !errors.Is(errGot, driver.ErrSkip) {
							t.Errorf("CheckNamedValue(%T) = %v for a driver without it, want driver.ErrSkip", v, errGot)
						}
						continue
					}
					nvWant := driver.NamedValue{Ordinal: 1, Value: v}
					errWant := nvc.CheckNamedValue(&nvWant)
					if (errGot == nil) != (errWant == nil) || !reflect.DeepEqual(nvGot, nvWant) {
						t.Errorf("CheckNamedValue(%T) = %v, %v; the driver gives %v, %v", v, nvGot, errGot, nvWant, errWant)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// celsius is an argument type the application converts itself.
type celsius float64

func (c celsius) Value() (driver.Value, error) { return float64(c), nil }

// TestRoundTripSameArguments runs the same queries with the same arguments
// through a wrapped and a plain pool: they must accept and refuse the same
// arguments and return the same values, the driver's own conversions included.
func TestRoundTripSameArguments(t *testing.T) {
	ctx := context.Background()
	args := []any{
		int64(-3), "text", []byte("bytes"), true, 2.5, nil,
		time.Date(2024, 2, 29, 12, 0, 0, 123000000, time.UTC),
		uint64(1<<63 + 5), // MySQL converts it; the default conversion refuses it
		[]int64{1, 2},     // pgx encodes it; the others refuse it
		struct{}{},        // nobody takes it
		sql.NullInt64{Int64: 9, Valid: true},
		sql.Named("a", 1),
		celsius(21.5),
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn := dsnFor(t, tg)
			var c rtcount.Counter
			_, wrapped := open(t, dsn, &c)
			plainDB, err := session.Open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			plain := testdb.Raw(t, plainDB)
			defer plain.Close()
			queries := []string{"SELECT " + marker(tg)}
			if tg.Name == "postgres" {
				queries = []string{"SELECT CAST($1 AS text)", "SELECT CAST(CAST($1 AS int8[]) AS text)"}
			}
			for _, q := range queries {
				for _, a := range args {
					sameArgument(ctx, t, wrapped, plain, q, a)
				}
			}
		})
	}
}

// sameArgument runs q with argument a on both pools, directly and prepared,
// and compares the outcomes.
func sameArgument(ctx context.Context, t *testing.T, wrapped, plain *sql.DB, q string, a any) {
	t.Helper()
	direct := func(db *sql.DB) (string, error) {
		var out sql.NullString
		err := db.QueryRowContext(ctx, q, a).Scan(&out)
		return fmt.Sprint(out), err
	}
	prepared := func(db *sql.DB) (string, error) {
		stmt, err := db.PrepareContext(ctx, q)
		if err != nil {
			return "", err
		}
		defer stmt.Close()
		var out sql.NullString
		err = stmt.QueryRowContext(ctx, a).Scan(&out)
		return fmt.Sprint(out), err
	}
	for _, way := range []struct {
		name string
		run  func(*sql.DB) (string, error)
	}{{"direct", direct}, {"prepared", prepared}} {
		got, errGot := way.run(wrapped)
		want, errWant := way.run(plain)
		if (errGot == nil) != (errWant == nil) || got != want {
			t.Errorf("%s (%s) with %T: wrapped gives %q, %v; plain gives %q, %v", q, way.name, a, got, errGot, want, errWant)
		}
	}
}

// TestRoundTripOpenWrappedNil checks the refusal of a wrap that returns nil,
// and that a nil wrap is plain Open.
func TestRoundTripOpenWrappedNil(t *testing.T) {
	dsn := dsnFor(t, testdb.Target{Name: "sqlite"})
	if _, err := session.OpenWrapped(dsn, func(driver.Connector) driver.Connector { return nil }); err == nil {
		t.Fatal("OpenWrapped with a wrap returning nil succeeded")
	}
	db, err := session.OpenWrapped(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	testdb.Close(db)
}

// TestRoundTripKindString names every kind and marks unknown ones.
func TestRoundTripKindString(t *testing.T) {
	for k, want := range map[rtcount.Kind]string{rtcount.Exec: "exec", rtcount.Ping: "ping", rtcount.Kind(99): "Kind(99)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
	if got := (rtcount.Counts{}).String(); got != "none" {
		t.Errorf("empty Counts = %q, want none", got)
	}
}
