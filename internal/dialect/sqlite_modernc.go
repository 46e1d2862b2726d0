//go:build !sqlelect_nomodernc

package dialect

import (
	"database/sql/driver"
	"errors"

	msqlite "modernc.org/sqlite"
)

// moderncAvailable reports nil: modernc.org/sqlite is compiled in.
func moderncAvailable() error { return nil }

// moderncDriverName is the database/sql name modernc.org/sqlite registers.
const moderncDriverName = "sqlite"

// isModerncDriver reports whether d is modernc.org/sqlite's driver.
func isModerncDriver(d driver.Driver) bool {
	_, ok := d.(*msqlite.Driver)
	return ok
}

// classifyModernc sorts errors of modernc.org/sqlite by their result code
// (extended codes, as the driver turns them on); ok is false for errors
// that do not come from it.
func classifyModernc(err error) (c Class, ok bool) {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return Other, false
	}
	return classifySQLiteCode(se.Code()&0xff, se.Error()), true
}
