//go:build !cgo

package dialect

// sqliteAvailable reports that SQLite cannot be used: mattn/go-sqlite3 is
// only a stub in a program built without cgo.
func sqliteAvailable() error { return ErrSQLiteNeedsCgo }

// classifySQLite has nothing to sort: without cgo no SQLite error occurs.
func classifySQLite(error) (Class, bool) { return Other, false }

// cgoEnabled is false in builds without cgo (for tests).
const cgoEnabled = false
