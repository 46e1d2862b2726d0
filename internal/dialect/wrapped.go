package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
)

// Instrumentation (OpenTelemetry's otelsql, round-trip counters) wraps a
// driver, its connector and its connections in types of its own, so the
// pool's Driver() no longer says which database it reaches. The helpers
// here look through such wrappers.

// UnwrapDriver returns the driver under wrappers that expose it with an
// Unwrap() driver.Driver method, else d.
func UnwrapDriver(d driver.Driver) driver.Driver {
	for i := 0; i < maxWrappers; i++ {
		u, ok := d.(interface{ Unwrap() driver.Driver })
		if !ok {
			break
		}
		d = u.Unwrap()
	}
	return d
}

// UnwrapConn returns the driver's connection under wrappers that expose it
// with an Unwrap() driver.Conn method (session.OpenWrapped's convention)
// or a Raw() driver.Conn method (github.com/XSAM/otelsql), else dc.
func UnwrapConn(dc any) any {
	for i := 0; i < maxWrappers; i++ {
		switch u := dc.(type) {
		case interface{ Unwrap() driver.Conn }:
			dc = u.Unwrap()
		case interface{ Raw() driver.Conn }:
			dc = u.Raw()
		default:
			return dc
		}
	}
	return dc
}

// maxWrappers bounds the unwrapping, against a wrapper that returns itself.
const maxWrappers = 16

// ForConn returns the dialect of a driver connection, as database/sql's
// Conn.Raw hands it out, looking through wrappers (UnwrapConn). It is how
// a pool opened through a wrapping driver is recognised.
func ForConn(dc any) (Dialect, error) {
	c := UnwrapConn(dc)
	t := reflect.TypeOf(c)
	if t != nil && t.Kind() == reflect.Pointer {
		switch t.Elem().PkgPath() {
		case "github.com/jackc/pgx/v5/stdlib":
			return postgres{}, nil
		case "github.com/go-sql-driver/mysql":
			return mysql{}, nil
		case "github.com/mattn/go-sqlite3", "modernc.org/sqlite":
			return sqlite{}, nil
		case "github.com/lib/pq":
			return nil, fmt.Errorf("connection %T (lib/pq) is not supported: open the pool with pgx's database/sql driver instead "+
				"(import _ \"github.com/jackc/pgx/v5/stdlib\"; sql.Open(\"pgx\", dsn), same DSN)", c)
		}
	}
	return nil, fmt.Errorf("connection %T is not of a supported driver (want pgx, go-sql-driver/mysql, mattn/go-sqlite3 or modernc.org/sqlite), "+
		"and the wrapper around it does not expose it through Unwrap() driver.Conn or Raw() driver.Conn; "+
		"name the database with session.WrapDialect", dc)
}

// ForPool returns the dialect of a pool: by its driver, looking through
// wrappers that expose the driver (UnwrapDriver), and otherwise by one of
// its connections (ForConn), which takes a connection from the pool. A
// lib/pq pool is refused by its driver.
func ForPool(ctx context.Context, db *sql.DB) (Dialect, error) {
	drv := UnwrapDriver(db.Driver())
	d, err := ForDriver(drv)
	if err == nil {
		return d, nil
	}
	if t := reflect.TypeOf(drv); t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "github.com/lib/pq" {
		return nil, err
	}
	conn, cerr := db.Conn(ctx)
	if cerr != nil {
		return nil, fmt.Errorf("%w; and no connection to look at: %w", err, cerr)
	}
	defer conn.Close()
	var ferr error
	if rerr := conn.Raw(func(dc any) error {
		d, ferr = ForConn(dc)
		return nil
	}); rerr != nil {
		return nil, rerr
	}
	if ferr != nil {
		return nil, fmt.Errorf("%w; %w", err, ferr)
	}
	return d, nil
}
