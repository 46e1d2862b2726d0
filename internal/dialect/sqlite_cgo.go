//go:build cgo

package dialect

import (
	"errors"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// sqliteAvailable reports nil: mattn/go-sqlite3 is compiled in.
func sqliteAvailable() error { return nil }

// classifySQLite sorts errors of mattn/go-sqlite3 by their result code; ok
// is false for errors that do not come from it.
func classifySQLite(err error) (c Class, ok bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return Other, false
	}
	switch {
	case se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked:
		return Transient, true
	case strings.Contains(se.Error(), "no such table"), strings.Contains(se.Error(), "no such column"),
		strings.Contains(se.Error(), "has no column named"): // a table, or a column of schema version 2, missing
		return MissingTable, true
	}
	return Other, true
}

// cgoEnabled is true in builds with cgo (for tests).
const cgoEnabled = true
