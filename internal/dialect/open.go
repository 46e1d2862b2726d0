package dialect

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	drv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// Target describes where a DSN points, for error messages: never the password.
type Target struct {
	// Database is the dialect name.
	Database string
	// Where is host:port (or socket) and database name, or a file path.
	Where string
	// Secret is the password, kept only so messages can be scrubbed of it.
	Secret string
}

func (t Target) String() string { return t.Database + " at " + t.Where }

// Scrub removes the password from s.
func (t Target) Scrub(s string) string {
	if t.Secret == "" {
		return s
	}
	return strings.ReplaceAll(s, t.Secret, "xxxxx")
}

// Opened is a DSN turned into what gorm.Open needs.
type Opened struct {
	Dialect Dialect
	// DriverName and DSN are what to hand to sql.Open.
	DriverName string
	DSN        string
	Target     Target
	// AfterOpen runs once on the opened pool, e.g. to finish settings that
	// depend on the server's version. It may return a new DSN to reopen with.
	AfterOpen func(db *sql.DB) (reopenDSN string, err error)
}

// ErrDSN is wrapped by every error about the form of a DSN.
var ErrDSN = errors.New("invalid DSN")

// Open recognizes a DSN and applies what its database needs. Recognized forms:
//
//	postgres://... and postgresql://...
//	mysql://user:pass@tcp(host:port)/db?... and the mysql driver's own form
//	sqlite:PATH, sqlite://PATH, file:PATH, and paths ending in .db, .sqlite or .sqlite3
func Open(dsn string) (Opened, error) {
	lower := strings.ToLower(dsn)
	switch {
	case dsn == "":
		return Opened{}, fmt.Errorf("%w: empty", ErrDSN)
	case strings.ContainsRune(dsn, 0):
		return Opened{}, fmt.Errorf("%w: contains a NUL byte", ErrDSN)
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return openPostgres(dsn)
	case strings.HasPrefix(lower, "mysql://"):
		return openMySQL(dsn[len("mysql://"):])
	case strings.HasPrefix(lower, "sqlite://"):
		return openSQLite(dsn[len("sqlite://"):])
	case strings.HasPrefix(lower, "sqlite3:"):
		return openSQLite(dsn[len("sqlite3:"):])
	case strings.HasPrefix(lower, "sqlite:"):
		return openSQLite(dsn[len("sqlite:"):])
	case strings.HasPrefix(lower, "file:"), dsn == ":memory:":
		return openSQLite(dsn)
	case looksLikeSQLiteFile(lower):
		return openSQLite(dsn)
	case strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(") || strings.HasPrefix(dsn, "tcp("):
		return openMySQL(dsn)
	}
	return Opened{}, fmt.Errorf("%w: unrecognized form (want postgres://, mysql://, user:pass@tcp(host:port)/db, sqlite:PATH, file:PATH or a .db path)", ErrDSN)
}

func looksLikeSQLiteFile(lower string) bool {
	p, _, _ := strings.Cut(lower, "?")
	for _, ext := range []string{".db", ".sqlite", ".sqlite3"} {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

// ForDriver returns the dialect of a database/sql driver.
func ForDriver(d driver.Driver) (Dialect, error) {
	switch d.(type) {
	case *stdlib.Driver:
		return postgres{}, nil
	case *drv.MySQLDriver:
		return mysql{}, nil
	case *sqlite3.SQLiteDriver:
		return sqlite{}, nil
	}
	return nil, fmt.Errorf("driver %T is not supported (want pgx, go-sql-driver/mysql or mattn/go-sqlite3)", d)
}
