//go:build !cgo

package dialect

// mattnAvailable reports that mattn/go-sqlite3 cannot be used: it is only
// a stub in a program built without cgo.
func mattnAvailable() error { return ErrSQLiteNeedsCgo }

// classifyMattn has nothing to sort: without cgo mattn/go-sqlite3 returns
// no SQLite error.
func classifyMattn(error) (Class, bool) { return Other, false }

// cgoEnabled is false in builds without cgo (for tests).
const cgoEnabled = false
