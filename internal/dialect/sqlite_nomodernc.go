//go:build sqlelect_nomodernc

package dialect

import (
	"database/sql/driver"
	"errors"
)

// errNoModernc is returned for driver=modernc by a program built with the
// sqlelect_nomodernc tag, which leaves modernc.org/sqlite out.
var errNoModernc = errors.New("sqlite driver=modernc: this program was built with -tags sqlelect_nomodernc, which leaves modernc.org/sqlite out")

// moderncAvailable reports that modernc.org/sqlite is left out.
func moderncAvailable() error { return errNoModernc }

// moderncDriverName is the database/sql name modernc.org/sqlite registers.
const moderncDriverName = "sqlite"

// isModerncDriver is false: the driver is not compiled in.
func isModerncDriver(driver.Driver) bool { return false }

// classifyModernc has nothing to sort.
func classifyModernc(error) (Class, bool) { return Other, false }
