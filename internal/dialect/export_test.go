package dialect

import "database/sql/driver"

// ClockPlus reads the clock and the clock plus a bound duration, to test
// the pieces of d that write the clock into statements.
func ClockPlus(d Dialect) string {
	p := d.(pieces)
	return p.rebind("SELECT " + p.now() + ", " + p.nowPlus())
}

// MySQLForTest is the MySQL dialect, for TiDB when tidb is set.
func MySQLForTest(tidb bool) Dialect { return mysql{tidb: tidb} }

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
