//go:build cgo

package dialect

import (
	"errors"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// mattnAvailable reports nil: mattn/go-sqlite3 is compiled in.
func mattnAvailable() error { return nil }

// classifyMattn sorts errors of mattn/go-sqlite3 by their result code; ok
// is false for errors that do not come from it.
func classifyMattn(err error) (c Class, ok bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return Other, false
	}
	return classifySQLiteCode(int(se.Code), se.Error()), true
}

// cgoEnabled is true in builds with cgo (for tests).
const cgoEnabled = true
