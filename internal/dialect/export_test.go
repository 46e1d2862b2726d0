package dialect

// ClockPlus reads the clock and the clock plus a bound duration, to test
// the pieces of d that write the clock into statements.
func ClockPlus(d Dialect) string {
	p := d.(pieces)
	return p.rebind("SELECT " + p.now() + ", " + p.nowPlus())
}
