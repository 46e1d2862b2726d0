package session_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

// instrumented wraps a connector as instrumentation such as otelsql does:
// its Driver is a type of its own, and its connections are wrappers that
// expose the driver's connection through Raw unless hide is set.
type instrumented struct {
	inner driver.Connector
	hide  bool
}

type instrumentedDriver struct{ inner driver.Driver }

func (d instrumentedDriver) Open(name string) (driver.Conn, error) { return d.inner.Open(name) }

func (c instrumented) Driver() driver.Driver { return instrumentedDriver{c.inner.Driver()} }

func (c instrumented) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if c.hide {
		return &hiddenConn{dc}, nil
	}
	return &rawConn{hiddenConn{dc}}, nil
}

// hiddenConn forwards what database/sql needs and hides the connection.
type hiddenConn struct{ driver.Conn }

func (c *hiddenConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *hiddenConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *hiddenConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

// rawConn exposes the driver's connection the way otelsql does.
type rawConn struct{ hiddenConn }

func (c *rawConn) Raw() driver.Conn { return c.Conn }

func sqliteConnector(t *testing.T) driver.Connector {
	t.Helper()
	name, dsn := testdb.SQLiteSQL(t, filepath.Join(t.TempDir(), "w.db"))
	probe, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	return dsnOpener{dsn: dsn, d: probe.Driver()}
}

type dsnOpener struct {
	dsn string
	d   driver.Driver
}

func (c dsnOpener) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnOpener) Driver() driver.Driver                        { return c.d }

// TestWrapInstrumentedPool: Wrap recognises a pool opened through a
// wrapping driver by the connection underneath, and runs elections on it;
// a wrapper that hides its connection is refused with an error that names
// WrapDialect, which then works; WrapDialect refuses unknown names.
func TestWrapInstrumentedPool(t *testing.T) {
	sqlDB := sql.OpenDB(instrumented{inner: sqliteConnector(t)})
	t.Cleanup(func() { sqlDB.Close() })
	db, err := session.Wrap(sqlDB)
	if err != nil {
		t.Fatalf("Wrap of an instrumented pool: %v", err)
	}
	works(t, db, "sqlite")

	hidden := sql.OpenDB(instrumented{inner: sqliteConnector(t), hide: true})
	t.Cleanup(func() { hidden.Close() })
	_, err = session.Wrap(hidden)
	if err == nil || !strings.Contains(err.Error(), "WrapDialect") || !strings.Contains(err.Error(), "instrumentedDriver is not supported") {
		t.Fatalf("Wrap of a pool hiding its connections: %v, want an error naming WrapDialect", err)
	}
	for _, bad := range []string{"", "oracle", "Postgres"} {
		if _, err := session.WrapDialect(hidden, bad); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("WrapDialect(%q): %v, want an error", bad, err)
		}
	}
	if _, err := session.WrapDialect(nil, "sqlite"); err == nil {
		t.Error("WrapDialect(nil): no error")
	}
	db, err = session.WrapDialect(hidden, "sqlite")
	if err != nil {
		t.Fatalf("WrapDialect: %v", err)
	}
	works(t, db, "sqlite")
}
