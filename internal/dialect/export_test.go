package dialect

import (
	"database/sql"
	"database/sql/driver"
)

// ClockPlus reads the clock and the clock plus a bound duration, to test
// the pieces of d that write the clock into statements.
func ClockPlus(d Dialect) string {
	p := d.(pieces)
	return p.rebind("SELECT " + p.now() + ", " + p.nowPlus())
}

// MySQLForTest is the MySQL dialect, for TiDB when tidb is set.
func MySQLForTest(tidb bool) Dialect { return mysql{tidb: tidb} }

// PostgresForTest is the PostgreSQL dialect, for tests of its statements'
// text.
func PostgresForTest() Dialect { return postgres{} }

// PGConnector is the connector Open uses for a postgres DSN, and a function
// that reports what its connections found: whether they reach a pooler
// (known once one connection answered) and how many cancel requests the
// connector withheld.
func PGConnector(dsn string) (driver.Connector, func() (known, pooled bool, withheld int64), error) {
	c, err := pgConnector(dsn)
	if err != nil {
		return nil, nil, err
	}
	r := c.(pgBoundedConnector).route
	return c, func() (bool, bool, int64) {
		st := r.state.Load()
		return st != routeUnknown, st == routePooled, r.withheld.Load()
	}, nil
}

// CgoEnabled reports whether SQLite is usable in this test binary.
const CgoEnabled = cgoEnabled

// OpenSQLiteRaw opens a bare pool (without session's wrapping, and without
// pinging it) on a SQLite DSN as Open reads it: through the driver the DSN
// names, or the default one, with the settings Open adds.
func OpenSQLiteRaw(dsn string) (*sql.DB, error) {
	o, err := Open(dsn)
	if err != nil {
		return nil, err
	}
	return sql.Open(o.DriverName, o.DSN)
}

// SQLiteDriverName names the SQLite driver under db's pool: "mattn",
// "modernc", or "" for any other.
func SQLiteDriverName(db *sql.DB) string { return sqliteDriverName(UnwrapDriver(db.Driver())) }
