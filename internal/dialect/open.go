package dialect

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

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
	// Pool is how the pool that is returned is sized.
	Pool PoolSettings
	// Connector, when not nil, makes the connector to run the pool on, in
	// place of the one sql.Open(DriverName, dsn) would use. It is called
	// with DSN (the reopened one, after AfterOpen).
	Connector func(dsn string) (driver.Connector, error)
}

// PoolSettings sizes a database/sql pool.
//
// database/sql keeps only two idle connections unless told otherwise and
// closes every other connection handed back to it. A process whose Electors,
// handoff listeners and leader work run on one pool often has more than two
// statements under way at once, so most of its connections were closed as
// they came back and opened again for the next round. On PostgreSQL every
// connection opened is a new server process: under load the opening took
// longer than the rounds between, and with two namespaces per process the
// rounds stalled to a few percent of their rate.
type PoolSettings struct {
	// MaxIdleConns is how many idle connections the pool keeps.
	MaxIdleConns int
	// ConnMaxIdleTime closes a connection idle for that long; 0 never does.
	ConnMaxIdleTime time.Duration
	// ConnMaxLifetime closes a connection that old when it is next idle; 0
	// never does.
	ConnMaxLifetime time.Duration
}

// Apply sets the pool's limits.
func (p PoolSettings) Apply(db *sql.DB) {
	db.SetMaxIdleConns(p.MaxIdleConns)
	db.SetConnMaxIdleTime(p.ConnMaxIdleTime)
	db.SetConnMaxLifetime(p.ConnMaxLifetime)
}

// serverPool is the pool of a database reached over the network: it keeps
// the connections its busiest moment needed, lets them go after a few idle
// minutes, and replaces each after half an hour, so that a pool does not
// hold on for ever to a server a failover or a pooler has moved away from.
var serverPool = PoolSettings{MaxIdleConns: 32, ConnMaxIdleTime: 5 * time.Minute, ConnMaxLifetime: 30 * time.Minute}

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
