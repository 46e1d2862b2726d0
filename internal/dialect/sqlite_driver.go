package dialect

import (
	"database/sql/driver"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	sqlite3 "github.com/mattn/go-sqlite3"
	"gorm.io/gorm"
)

// SQLite runs on one of two database/sql drivers, both compiled into every
// program: mattn/go-sqlite3 (SQLite's C code, through cgo) and
// modernc.org/sqlite (SQLite translated to Go). A DSN chooses one with its
// driver parameter; without it a program built with cgo uses mattn and one
// built without cgo modernc, where mattn is only a stub. Both are opened
// with the same settings (WAL with synchronous=NORMAL, a 5 s busy timeout,
// immediate transactions, times written as mattn writes them) and share
// the dialect: the statements, the
// clock and the handoff file do not depend on the driver.

// The values of a SQLite DSN's driver parameter.
const (
	// SQLiteMattn is github.com/mattn/go-sqlite3, SQLite's C code compiled
	// with cgo: the default in programs built with cgo.
	SQLiteMattn = "mattn"
	// SQLiteModernc is modernc.org/sqlite, SQLite translated to Go: the
	// default in programs built without cgo (CGO_ENABLED=0).
	SQLiteModernc = "modernc"
)

// sqliteDriverParam is the DSN parameter that chooses the driver. It is
// taken out of the DSN before the driver sees it.
const sqliteDriverParam = "driver"

// sqliteDefault, when set, is the driver of SQLite DSNs that name none
// (SetDefaultSQLiteDriver).
var sqliteDefault atomic.Pointer[string]

// DefaultSQLiteDriver is the driver of a SQLite DSN that does not name
// one: SQLiteMattn in a program built with cgo, SQLiteModernc in one built
// without.
func DefaultSQLiteDriver() string {
	if p := sqliteDefault.Load(); p != nil {
		return *p
	}
	if cgoEnabled || moderncAvailable() != nil {
		return SQLiteMattn
	}
	return SQLiteModernc
}

// SetDefaultSQLiteDriver makes name the driver of SQLite DSNs that do not
// name one, until restore is called. It is a test hook: package testdb
// sets it from SQLELECT_SQLITE_DRIVER, so that the suites run on either
// driver; nothing else calls it.
func SetDefaultSQLiteDriver(name string) (restore func(), err error) {
	if err := sqliteDriverUsable(name); err != nil {
		return nil, err
	}
	prev := sqliteDefault.Swap(&name)
	return func() { sqliteDefault.Store(prev) }, nil
}

// SQLiteDrivers lists the drivers this program can open SQLite with:
// SQLiteMattn in a program built with cgo, and SQLiteModernc.
func SQLiteDrivers() []string {
	var out []string
	for _, name := range []string{SQLiteMattn, SQLiteModernc} {
		if sqliteDriverUsable(name) == nil {
			out = append(out, name)
		}
	}
	return out
}

// sqliteDriverUsable returns nil when the driver called name can open
// databases in this program, else an error saying why not.
func sqliteDriverUsable(name string) error {
	switch name {
	case SQLiteMattn:
		return mattnAvailable()
	case SQLiteModernc:
		return moderncAvailable()
	}
	return fmt.Errorf("%w: sqlite %s=%q: want %s (mattn/go-sqlite3, cgo) or %s (modernc.org/sqlite, pure Go)",
		ErrDSN, sqliteDriverParam, name, SQLiteMattn, SQLiteModernc)
}

// sqliteDriverOf names the driver under db's pool, looking through
// wrappers that expose it; "" when it is neither, or db is not on a pool.
func sqliteDriverOf(db *gorm.DB) string {
	if db == nil || db.ConnPool == nil {
		return ""
	}
	pool, err := db.DB()
	if err != nil {
		return ""
	}
	return sqliteDriverName(UnwrapDriver(pool.Driver()))
}

// sqliteDriverName names a SQLite driver, "" for any other.
func sqliteDriverName(d driver.Driver) string {
	if _, ok := d.(*sqlite3.SQLiteDriver); ok {
		return SQLiteMattn
	}
	if isModerncDriver(d) {
		return SQLiteModernc
	}
	return ""
}

// classifySQLiteCode sorts a SQLite error by its primary result code and
// message, whichever driver returned it.
func classifySQLiteCode(code int, msg string) Class {
	switch code {
	case sqliteBusy, sqliteLocked:
		return Transient
	case sqliteReadOnly:
		// A connection that opened a file it may not write (or with
		// mode=ro) stays read-only; a new one may not be.
		return ReadOnly
	}
	if strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column") ||
		strings.Contains(msg, "has no column named") { // a table, or a column of schema version 2, missing
		return MissingTable
	}
	return Other
}

// SQLite's primary result codes the library acts on.
const (
	sqliteBusy     = 5 // SQLITE_BUSY
	sqliteLocked   = 6 // SQLITE_LOCKED
	sqliteReadOnly = 8 // SQLITE_READONLY
)

// openSQLite turns a SQLite DSN without its scheme (a path, file:PATH or
// :memory:, with parameters) into the driver's DSN.
func openSQLite(path string) (Opened, error) {
	if path == "" {
		return Opened{}, fmt.Errorf("%w: sqlite needs a file path", ErrDSN)
	}
	base, query, _ := strings.Cut(path, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return Opened{}, fmt.Errorf("%w: sqlite query: %v", ErrDSN, err)
	}
	drv := DefaultSQLiteDriver()
	if vs := q[sqliteDriverParam]; len(vs) > 0 {
		drv = vs[0]
		for _, v := range vs[1:] {
			if v != drv {
				return Opened{}, fmt.Errorf("%w: sqlite %s is given twice, as %q and %q", ErrDSN, sqliteDriverParam, drv, v)
			}
		}
		q.Del(sqliteDriverParam)
	}
	if err := sqliteDriverUsable(drv); err != nil {
		return Opened{}, err
	}
	if base == "" {
		return Opened{}, fmt.Errorf("%w: sqlite needs a file path", ErrDSN)
	}
	if base == ":memory:" || base == "file::memory:" {
		// Every pooled connection to :memory: would get its own empty
		// database; the memdb VFS shares one among them.
		base = "file:/sqlelect-" + uuid.NewString()
		q.Set("vfs", "memdb")
	}
	memory := q.Get("vfs") == "memdb" || q.Get("mode") == "memory"
	if !memory {
		if err := claimSQLiteFile(strings.TrimPrefix(base, "file:"), drv); err != nil {
			return Opened{}, err
		}
	}
	driverName := "sqlite3"
	if drv == SQLiteModernc {
		if err := moderncQuery(q, memory); err != nil {
			return Opened{}, err
		}
		driverName = moderncDriverName
	} else {
		mattnQuery(q, memory)
	}
	if !strings.HasPrefix(base, "file:") {
		base = "file:" + base
	}
	return Opened{
		Dialect:    sqlite{},
		DriverName: driverName,
		DSN:        base + "?" + q.Encode(),
		// Connections cost nothing to keep, and an in-memory database
		// lives only while one of them is open: keep them all.
		Pool:   PoolSettings{MaxIdleConns: 32},
		Target: Target{Database: "sqlite", Where: strings.TrimPrefix(base, "file:")},
	}, nil
}

// sqliteFiles maps each SQLite file this process opened (its absolute
// path) to the driver it opened it with.
var sqliteFiles sync.Map

// claimSQLiteFile records that this process opens the file at path with
// the driver drv, and refuses the other driver on a file the process
// opened with one. Each driver is a copy of SQLite with its own table of
// the process's POSIX locks, and the kernel does not tell two holders in
// one process apart: the two would write the file at once and corrupt it.
// Processes on different drivers share a file safely.
func claimSQLiteFile(path, drv string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil // a name SQLite will resolve or refuse itself
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	if prev, loaded := sqliteFiles.LoadOrStore(abs, drv); loaded && prev != drv {
		return fmt.Errorf("%w: sqlite file %s is already open in this process through %s=%s; "+
			"two SQLite drivers in one process do not see each other's locks and would corrupt it: "+
			"open it through %s=%s here too", ErrDSN, abs, sqliteDriverParam, prev, sqliteDriverParam, prev)
	}
	return nil
}

// mattnQuery adds to q, in mattn/go-sqlite3's parameters, the settings the
// DSN leaves out.
func mattnQuery(q url.Values, memory bool) {
	setDefault := func(k, v string) {
		if q.Get(k) == "" {
			q.Set(k, v)
		}
	}
	setDefault("_txlock", "immediate")
	setDefault("_busy_timeout", "5000")
	if !memory {
		setDefault("_journal_mode", "WAL")
	}
}

// mattnPragmas are mattn/go-sqlite3's DSN parameters that set a PRAGMA,
// by the PRAGMA they set: modernc.org/sqlite sets the same with
// _pragma=NAME(VALUE), so that one DSN means the same on either driver.
var mattnPragmas = map[string]string{
	"_busy_timeout": "busy_timeout", "_timeout": "busy_timeout",
	"_journal_mode": "journal_mode", "_journal": "journal_mode",
	"_foreign_keys": "foreign_keys", "_fk": "foreign_keys",
	"_synchronous": "synchronous", "_sync": "synchronous",
	"_locking_mode": "locking_mode", "_locking": "locking_mode",
	"_auto_vacuum": "auto_vacuum", "_vacuum": "auto_vacuum",
	"_recursive_triggers": "recursive_triggers", "_rt": "recursive_triggers",
	"_case_sensitive_like": "case_sensitive_like", "_cslike": "case_sensitive_like",
	"_defer_foreign_keys": "defer_foreign_keys", "_defer_fk": "defer_foreign_keys",
	"_ignore_check_constraints": "ignore_check_constraints",
	"_query_only":               "query_only",
	"_secure_delete":            "secure_delete",
	"_cache_size":               "cache_size",
}

// moderncParams are modernc.org/sqlite's own DSN parameters, passed on as
// they are.
var moderncParams = map[string]bool{"_pragma": true, "_time_format": true, "_time_integer_format": true, "_txlock": true, "_inttotime": true}

// pragmaValue is what a PRAGMA set from a DSN may be given: a word or a
// number, so that a value cannot carry a second statement.
var pragmaValue = regexp.MustCompile(`^-?[A-Za-z0-9_]+$`)

// moderncQuery rewrites q, written in either driver's parameters, into
// modernc.org/sqlite's, and adds the settings it leaves out. A parameter
// of mattn/go-sqlite3 that has no counterpart (one beginning with _ that
// is not a PRAGMA) is an error rather than silently ignored.
func moderncQuery(q url.Values, memory bool) error {
	pragmas := q["_pragma"]
	for k, vs := range q {
		if !strings.HasPrefix(k, "_") || moderncParams[k] {
			continue
		}
		if k == "_loc" && len(vs) == 1 && strings.EqualFold(vs[0], "UTC") {
			// modernc.org/sqlite reads times without a zone as UTC.
			q.Del(k)
			continue
		}
		name, ok := mattnPragmas[k]
		if !ok {
			return fmt.Errorf("%w: sqlite parameter %s is not understood by %s=%s (modernc.org/sqlite); "+
				"set a PRAGMA with _pragma=name(value)", ErrDSN, k, sqliteDriverParam, SQLiteModernc)
		}
		v := vs[len(vs)-1]
		if !pragmaValue.MatchString(v) {
			return fmt.Errorf("%w: sqlite parameter %s=%q is not a word or a number", ErrDSN, k, v)
		}
		pragmas = append(pragmas, name+"("+v+")")
		q.Del(k)
	}
	// value returns the value a PRAGMA is set to, lower case, and whether
	// it is set.
	value := func(name string) (string, bool) {
		for _, p := range pragmas {
			n, v, _ := strings.Cut(strings.TrimSpace(strings.ToLower(p)), "(")
			if strings.TrimSpace(n) == name {
				return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), ")")), true
			}
		}
		return "", false
	}
	if _, ok := value("busy_timeout"); !ok {
		pragmas = append(pragmas, "busy_timeout(5000)")
	}
	if _, ok := value("journal_mode"); !memory && !ok {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	if _, ok := value("synchronous"); !ok {
		// mattn/go-sqlite3 sets synchronous=NORMAL unless its DSN says
		// otherwise: in WAL mode a commit does not wait for the disk, and
		// the last commits may be lost at a power failure (never to
		// corruption). modernc.org/sqlite keeps SQLite's FULL, an fsync
		// per commit, which made every write over twenty times slower.
		// Both run with NORMAL, so that the drivers keep the same promises.
		pragmas = append(pragmas, "synchronous(NORMAL)")
	}
	q["_pragma"] = pragmas
	if q.Get("_txlock") == "" {
		q.Set("_txlock", "immediate")
	}
	if q.Get("_time_format") == "" {
		// Times bound as time.Time are written as mattn/go-sqlite3 writes
		// them, "2006-01-02 15:04:05.999999999-07:00", not in the form of
		// time.Time.String.
		q.Set("_time_format", "sqlite")
	}
	return nil
}

// sqliteSettingsHint is what to add to the DSN of a handle on the driver
// called drv ("" when unknown) for the settings Check requires.
func sqliteSettingsHint(drv, mattn, modernc string) string {
	switch drv {
	case SQLiteMattn:
		return "add " + mattn + " to the DSN"
	case SQLiteModernc:
		return "add " + modernc + " to the DSN"
	}
	return "add " + mattn + " to a mattn/go-sqlite3 DSN, or " + modernc + " to a modernc.org/sqlite one"
}
