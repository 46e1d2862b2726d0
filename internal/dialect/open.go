package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
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

// Scrub removes the password from s where s shows it as the password of a
// connection string: user:PASSWORD@ (a URL's or the mysql driver's user
// information) and password=PASSWORD or password='PASSWORD' (a keyword or
// query parameter), in the forms a DSN escapes it. The same text elsewhere
// in s (a database or user name that happens to equal the password) is
// left alone.
func (t Target) Scrub(s string) string {
	return scrubPassword(s, t.Secret)
}

// scrubPassword replaces secret, in each of its written forms, where msg
// shows it as a password field.
func scrubPassword(msg, secret string) string {
	if secret == "" {
		return msg
	}
	kvQuoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret)
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), url.UserPassword("", secret).String()[1:]}
	for _, f := range forms {
		msg = strings.ReplaceAll(msg, ":"+f+"@", ":xxxxx@")
		msg = strings.ReplaceAll(msg, "password='"+f+"'", "password=xxxxx")
		msg = strings.ReplaceAll(msg, "password="+f, "password=xxxxx")
	}
	msg = strings.ReplaceAll(msg, "password='"+kvQuoted+"'", "password=xxxxx")
	return msg
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
	// ResetTimeout, when not nil, bounds the check a pooled connection gets
	// when it is handed out again (driver.SessionResetter), given the
	// context of the call that takes it. It also bounds the connection
	// attempt that asks whether a host answers (HostCheck). 0 means no bound
	// (a DSN that waits for ever): the check runs under the caller's context
	// alone, and no host is judged silent.
	ResetTimeout func(ctx context.Context) time.Duration
	// HostCheck, when not nil, finds connections to a host that stopped
	// answering.
	HostCheck *HostCheck
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
//	postgres://... and postgresql://..., one host or several
//	host=... port=... user=... dbname=... (libpq keyword/value pairs)
//	mysql://user:pass@host:port/db?..., mysql://user:pass@tcp(host:port)/db?...
//	and the mysql driver's own form, user:pass@tcp(host:port)/db?...
//	sqlite:PATH, sqlite://PATH, file:PATH, and paths ending in .db, .sqlite or .sqlite3,
//	with driver=mattn or driver=modernc to choose SQLite's driver (sqlite_driver.go)
func Open(dsn string) (Opened, error) {
	lower := strings.ToLower(dsn)
	switch {
	case dsn == "":
		return Opened{}, fmt.Errorf("%w: empty", ErrDSN)
	case strings.ContainsRune(dsn, 0):
		return Opened{}, fmt.Errorf("%w: contains a NUL byte", ErrDSN)
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return openPostgres(dsn)
	case libpqKeyword.MatchString(lower):
		return openPostgres(dsn)
	case strings.HasPrefix(lower, "mysql://"):
		return openMySQLURL(dsn[len("mysql://"):])
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
	case mysqlDriverForm(dsn):
		return openMySQL(dsn)
	}
	return Opened{}, fmt.Errorf("%w: unrecognized form (want postgres://, host=... dbname=..., mysql://, user:pass@tcp(host:port)/db, sqlite:PATH, file:PATH or a .db path)", ErrDSN)
}

// libpqKeyword matches a DSN that starts with one of libpq's connection
// keywords followed by '=': the keyword/value form of a PostgreSQL DSN.
var libpqKeyword = regexp.MustCompile(`^\s*(host|hostaddr|port|dbname|user|password|passfile|channel_binding|connect_timeout|client_encoding|options|application_name|fallback_application_name|keepalives|keepalives_idle|keepalives_interval|keepalives_count|tcp_user_timeout|replication|gssencmode|sslmode|requiressl|sslcompression|sslcert|sslkey|sslpassword|sslcertmode|sslrootcert|sslcrl|sslcrldir|sslsni|sslnegotiation|requirepeer|ssl_min_protocol_version|ssl_max_protocol_version|krbsrvname|gsslib|gssdelegation|service|target_session_attrs|load_balance_hosts)\s*=`)

// mysqlDriverForm reports whether dsn is in the mysql driver's own form,
// which names the network: user:pass@tcp(host:port)/db, tcp(host)/db,
// user@unix(/path)/db.
func mysqlDriverForm(dsn string) bool {
	return strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(") ||
		strings.HasPrefix(dsn, "tcp(") || strings.HasPrefix(dsn, "unix(")
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

// ErrUnsupportedDriver is wrapped by the errors of ForDriver (and so of
// ForPool) for a driver that is not pgx, go-sql-driver/mysql,
// mattn/go-sqlite3 or modernc.org/sqlite, lib/pq among them.
var ErrUnsupportedDriver = errors.New("not supported")

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
	if isModerncDriver(d) {
		return sqlite{}, nil
	}
	if err := RefuseLibPQ(d); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("driver %T is %w (want pgx, go-sql-driver/mysql, mattn/go-sqlite3 or modernc.org/sqlite)", d, ErrUnsupportedDriver)
}

// RefuseLibPQ returns an error wrapping ErrUnsupportedDriver, saying what
// to use instead, when d is lib/pq's driver; else nil.
func RefuseLibPQ(d driver.Driver) error {
	if t := reflect.TypeOf(d); t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "github.com/lib/pq" {
		return fmt.Errorf("driver %T (lib/pq) is %w: open the pool with pgx's database/sql driver instead "+
			"(import _ \"github.com/jackc/pgx/v5/stdlib\"; sql.Open(\"pgx\", dsn), same DSN), or use session.Open(dsn); "+
			"elections need pgx's errors to retry conflicts and its connections to LISTEN for handoffs", d, ErrUnsupportedDriver)
	}
	return nil
}
