package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// postgres is PostgreSQL through the pgx driver. now() is frozen at the start
// of a transaction, so the clock is clock_timestamp(), read after lock waits.
type postgres struct{}

var _ Dialect = postgres{}

var pgStatements = build(postgres{})

func (postgres) Name() string            { return "postgres" }
func (postgres) Statements() *Statements { return pgStatements }
func (postgres) Rebind(q string) string  { return rebindDollar(q) }
func (postgres) rebind(q string) string  { return rebindDollar(q) }
func (postgres) now() string             { return "clock_timestamp()" }
func (d postgres) nowPlus() string       { return d.plus(d.now()) }
func (postgres) plus(expr string) string {
	return "(" + expr + " + CAST(? AS bigint) * interval '1 microsecond')"
}
func (postgres) DurationArg(d time.Duration) any { return d.Microseconds() }
func (postgres) TimeArg(t time.Time) any         { return t.UTC() }

func (postgres) upsertCandidate() string {
	return "ON CONFLICT (namespace, candidate_id) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at, expires_at = excluded.expires_at"
}

func (postgres) insertIgnore() string { return "ON CONFLICT (namespace) DO NOTHING" }

func (postgres) selectLeader(lock Lock) string {
	// FOR UPDATE cannot apply to the nullable side of an outer join, so the
	// lock is taken in a CTE; the clock is read in the outer query, after it.
	suffix := ""
	switch lock {
	case ShareLock:
		suffix = " FOR SHARE"
	case UpdateLock:
		suffix = " FOR UPDATE"
	}
	return "WITH l AS (SELECT leader_id, term, lease_expires_at, acquired_at FROM election_leaders WHERE namespace = $1" + suffix + ") " +
		"SELECT clock_timestamp(), l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT 1) d LEFT JOIN l ON true"
}

// pgRenew renews the lease and refreshes the candidate row in one statement,
// from one reading of the clock taken after the row lock: the candidate's
// heartbeat is the lease's updated_at and both expire together.
const pgRenew = `WITH l AS (
  UPDATE election_leaders
  SET (updated_at, lease_expires_at) =
    (SELECT t.n, t.n + CAST($4 AS bigint) * interval '1 microsecond' FROM (SELECT clock_timestamp() AS n) t)
  WHERE namespace = $1 AND leader_id = $2 AND term = $3 AND lease_expires_at > clock_timestamp()
  RETURNING updated_at, lease_expires_at
), c AS (
  INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at)
  SELECT $1, $2, l.updated_at, l.updated_at, l.lease_expires_at FROM l
  ON CONFLICT (namespace, candidate_id) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at, expires_at = excluded.expires_at
)
SELECT lease_expires_at FROM l`

func (postgres) Renew(ctx context.Context, conn gorm.ConnPool, ns string, id uuid.UUID, term int64, expire time.Duration) (Renewed, bool, error) {
	var exp Time
	err := conn.QueryRowContext(ctx, pgRenew, ns, id, term, expire.Microseconds()).Scan(&exp)
	if errors.Is(err, sql.ErrNoRows) {
		return Renewed{}, false, nil
	}
	if err != nil {
		return Renewed{}, false, err
	}
	return Renewed{ExpiresAt: exp.Time}, true, nil
}

func (postgres) Classify(err error) Class {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return Other
	}
	switch pe.Code {
	case "40001", "40P01", "55P03":
		return Transient
	case "42P01":
		return MissingTable
	}
	return Other
}

func (postgres) Check(ctx context.Context, db *gorm.DB) (*sql.TxOptions, error) {
	var level string
	if err := db.WithContext(ctx).Raw("SHOW default_transaction_isolation").Row().Scan(&level); err != nil {
		return nil, err
	}
	if level == "read committed" {
		return nil, nil
	}
	// Elect's transaction needs to see rows committed while it waited for
	// the leader row's lock, which only READ COMMITTED gives.
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}, nil
}

// pgMigrationLock is the advisory lock key taken while migrating
// (the first eight bytes of "sqlelect" read as a big-endian integer).
const pgMigrationLock = 0x73716c656c656374

// LockMigrations begins a transaction on conn and takes a transaction-scoped
// advisory lock in it: the schema changes run in that transaction (DDL is
// transactional on PostgreSQL), and the lock ends with it, at commit or
// rollback. A session-level lock would not do behind a pooler in
// transaction mode: it would be taken on one server session, the DDL would
// run on others, and the unlock on yet another, leaving the lock held on a
// pooled session for the next migration to wait on for ever.
func (postgres) LockMigrations(ctx context.Context, conn *sql.Conn) (func(bool) error, error) {
	if _, err := conn.ExecContext(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED"); err != nil {
		return nil, fmt.Errorf("taking the migration lock: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgMigrationLock)); err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		return nil, fmt.Errorf("taking the migration lock: %w", err)
	}
	return endTransaction(conn), nil
}

func openPostgres(dsn string) (Opened, error) {
	isURL := false
	// The scheme is case-insensitive; pgconn knows it only in lower case
	// and would read "Postgres://..." as keyword=value pairs.
	if i := strings.Index(dsn, "://"); i >= 0 && libpqKeyword.FindStringIndex(strings.ToLower(dsn)) == nil {
		dsn = strings.ToLower(dsn[:i]) + dsn[i:]
		isURL = true
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return Opened{}, fmt.Errorf("%w: %s", ErrDSN, pgParseMessage(dsn, err))
	}
	hasTimezone := false
	for k := range cfg.RuntimeParams {
		hasTimezone = hasTimezone || strings.EqualFold(k, "timezone")
	}
	if isURL {
		u, err := url.Parse(dsn)
		if err != nil {
			return Opened{}, fmt.Errorf("%w: postgres URL does not parse", ErrDSN)
		}
		if !hasTimezone {
			// Timestamps come back in UTC, as the library writes them.
			q := u.Query()
			q.Set("timezone", "UTC")
			u.RawQuery = q.Encode()
		}
		if u.Host == "" && u.Path == "" && u.User == nil {
			// A bare postgres:// means every default. url.URL.String would
			// drop its "//", and pgx would then read it as keyword=value pairs.
			u.Path = "/"
		}
		dsn = u.String()
	} else if !hasTimezone {
		dsn = strings.TrimRight(dsn, " \t\n\r") + " timezone=UTC"
	}
	return Opened{
		Dialect:    postgres{},
		DriverName: "pgx",
		DSN:        dsn,
		Pool:       serverPool,
		Connector:  pgConnector,
		Target: Target{
			Database: "postgres",
			Where:    fmt.Sprintf("%s (database %q, user %q)", pgHosts(cfg), cfg.Database, cfg.User),
			Secret:   cfg.Password,
		},
	}, nil
}

// pgHosts lists the host:port pairs a configuration tries, in order.
func pgHosts(cfg *pgconn.Config) string {
	hosts := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, fb := range cfg.Fallbacks {
		h := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port)))
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return strings.Join(hosts, ",")
}

// pgConnectTimeout bounds each host's connection attempt when the DSN sets
// no connect_timeout. pgx tries the hosts of a multi-host DSN in order under
// one context: without a bound, a first host that hangs instead of refusing
// (a frozen VM, a black-holed route) used up every attempt's whole context,
// and a promoted replica listed second was never reached.
const pgConnectTimeout = 5 * time.Second

// pgKeepAlive probes an idle connection after 15 s and gives up on it after
// three unanswered probes 5 s apart, so that a pooled connection to a host
// that stopped answering is found dead within half a minute rather than the
// operating system's default of hours (Go's own default: over two minutes).
var pgKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// pgConnector is pgx's connector for dsn, with these changes.
//
// Each host's connection attempt is bounded by pgConnectTimeout unless the
// DSN sets connect_timeout, and connections send TCP keepalives
// (pgKeepAlive).
//
// Statements run in pgx's exec mode unless the DSN names another
// (default_query_exec_mode): each is sent as an unnamed statement with its
// parameters, in one round trip, instead of being prepared under a name
// that the connection keeps. A connection pooler in transaction mode
// (PgBouncer, and the poolers of hosted PostgreSQL) hands each transaction
// to whichever server session is free, so a named statement prepared
// through one client is found by another, or missing for the one that
// prepared it: with pgx's default, only the first process could open the
// database through PgBouncer ("prepared statement stmtcache_... already
// exists", 42P05). The library's statements are short and run once per
// round, so the cached plans saved little.
//
// And a connection whose context ends during a call is closed at once.
// pgx's own way, on a cancelled context, is to send a cancel request over a
// new connection (up to 15 s) and only then close the connection. Until
// then the server session lives on, and if its transaction locked the
// leader row, so does the lock: when the server was busy starting server
// processes, cancel requests took seconds, every candidate queued behind a
// transaction whose client had already given up, their rounds timed out
// and were cancelled the same way, and elections stalled. Closing the
// socket makes the server roll the transaction back and release its locks
// at once; pgx still sends its cancel request afterwards, which frees a
// session that was waiting for a lock.
func pgConnector(dsn string) (driver.Connector, error) {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	_, modeSet := pc.RuntimeParams["default_query_exec_mode"]
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !modeSet {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	// connect_timeout=0 (wait for ever) is the user's choice too.
	if pc.ConnectTimeout == 0 && !strings.Contains(strings.ToLower(dsn), "connect_timeout=") {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAliveConfig: pgKeepAlive}
	cfg.DialFunc = dialer.DialContext
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler { return closeOnCancel{c} }
	return stdlib.GetConnector(*cfg), nil
}

// closeOnCancel closes a connection the moment its call's context ends.
type closeOnCancel struct{ c *pgconn.PgConn }

func (h closeOnCancel) HandleCancel(context.Context) { h.c.Conn().Close() }
func (closeOnCancel) HandleUnwatchAfterCancel()      {}

// pgParseMessage says why pgconn rejected dsn without showing a password.
// pgconn masks the password of a URL it can parse, but not one given as a
// password parameter, and it quotes in full a URL that does not parse.
func pgParseMessage(dsn string, err error) string {
	if !strings.Contains(dsn, "://") || libpqKeyword.MatchString(strings.ToLower(dsn)) {
		return scrubPassword(err.Error(), kvPassword(dsn))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return "postgres URL does not parse: " + ue.Err.Error()
	}
	u, perr := url.Parse(dsn)
	if perr != nil {
		return "postgres URL does not parse"
	}
	secrets := u.Query()["password"]
	if pw, ok := u.User.Password(); ok {
		secrets = append(secrets, pw)
	}
	msg := err.Error()
	for _, s := range secrets {
		msg = scrubPassword(msg, s)
	}
	return msg
}

// kvPassword is the value of the password keyword in a libpq keyword/value
// string, unquoted, or "" when there is none.
func kvPassword(dsn string) string {
	m := kvPasswordKey.FindStringIndex(dsn)
	if m == nil {
		return ""
	}
	rest := dsn[m[1]:]
	if !strings.HasPrefix(rest, "'") {
		end := strings.IndexAny(rest, " \t\n\r")
		if end < 0 {
			end = len(rest)
		}
		return rest[:end]
	}
	var b strings.Builder
	for i := 1; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '\\' && i+1 < len(rest):
			i++
			b.WriteByte(rest[i])
		case c == '\'':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var kvPasswordKey = regexp.MustCompile(`(?:^|\s)password\s*=\s*`)

func (postgres) Gorm(pool *sql.DB) gorm.Dialector {
	return gormpg.New(gormpg.Config{Conn: pool})
}

func (postgres) CacheStatements() bool { return false }
