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
	"sync/atomic"
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
type postgres struct {
	// schema, when set, holds the election tables (InSchema); the
	// statements name them qualified.
	schema string
}

var _ Dialect = postgres{}

var pgStatements = withVacateNotify(withGrantTerm(build(postgres{})))

// withGrantTerm adds GrantTerm and RefreshGrantTerm to s, PostgreSQL's
// statements: the grant and the new term's history row (and the refresh
// of the candidate's row before them) share the statement's snapshot, and
// the history row is written only for the row the grant returned.
func withGrantTerm(s *Statements) *Statements {
	p := postgres{}
	grant := "g AS (" + grantSeat + " RETURNING namespace, term) " + insertTerm +
		"SELECT g.namespace, g.term, CAST(? AS uuid), CAST(? AS text), CAST(? AS bigint), CAST(? AS text), CAST(? AS timestamptz) FROM g " +
		termUpsert(p)
	s.GrantTerm = p.rebind("WITH " + grant)
	s.RefreshGrantTerm = p.rebind("WITH r AS (" + upsertAt(p) + "), " + grant)
	return s
}

// pgVacateNotify is VacateNotify on PostgreSQL: the seat is cleared, the
// candidate row deleted (when $4 says so), the term recorded as ended and
// the notification queued in one statement, which outside a transaction
// is one round trip where the separate statements took six with their
// BEGIN and COMMIT. Every part shares the statement's snapshot: the
// history row is ended, and the notification sent, only for the term the
// update returned.
//
// The snapshot is also why v clears the seat only in the term seen reads
// in it. An update that waits for the row's lock decides on the row the
// other transaction left; had that transaction granted the candidate a
// new term, the new term's history row, inserted by it, is not in the
// snapshot, and h would leave that term open. The statement then clears
// nothing, and its second column says the seat moved: the candidate held
// it in the snapshot, and v did not clear it.
const pgVacateNotify = `WITH seen AS (
  SELECT term FROM election_leaders WHERE namespace = $1 AND leader_id = $2 AND CAST($3 AS bigint) IN (0, term)
), v AS (
  UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = clock_timestamp()
  WHERE namespace = $1 AND leader_id = $2 AND term = (SELECT term FROM seen)
  RETURNING namespace, term
), d AS (
  DELETE FROM election_candidates WHERE namespace = $1 AND candidate_id = $2 AND CAST($4 AS boolean)
), h AS (
  UPDATE election_history AS t SET ended_at = clock_timestamp(), end_reason = $5 FROM v
  WHERE t.namespace = v.namespace AND t.term = v.term AND t.leader_id = $2 AND t.ended_at IS NULL
), n AS (
  SELECT pg_notify($6, $7) FROM v
)
SELECT (SELECT count(*) FROM n) > 0, EXISTS (SELECT 1 FROM seen) AND NOT EXISTS (SELECT 1 FROM v)`

// withVacateNotify adds VacateNotify and Acquire to s, PostgreSQL's
// statements.
func withVacateNotify(s *Statements) *Statements {
	s.VacateNotify = pgVacateNotify
	s.Acquire, s.AcquireKept = pgAcquire(true), pgAcquire(false)
	return s
}

// pgAcquire is Acquire (refresh) or AcquireKept on PostgreSQL: the whole
// of Elect outside a caller's transaction, in one statement and one round
// trip.
//
// seen reads the seat with the statement's snapshot, without a lock. seat
// locks the row only when that reading shows it free (vacant, lapsed by
// the clock) or the candidate's own, or when $8 asks for the lock: another
// candidate's live lease is otherwise never locked, so the leader's
// renewal never waits for a follower. A row updated since the snapshot is
// re-read under the lock and locked only if it still qualifies
// (EvalPlanQual), its newest version being what the other items see. s
// reads the clock from seat's row, so after the lock was granted; every
// other item takes its times from that one reading. c creates a missing
// row in term 1 (ON CONFLICT DO NOTHING: a row created by another caller
// since the snapshot leaves it to the caller to run the statement again);
// g grants a locked row in the next term, or renews the candidate's own
// live lease in its term, updating the row seat locked only while its term
// is still the one locked. h records a granted term, x ends a lapsed one
// at its expiry, r (with refresh) refreshes the candidate's row. The row
// yielded gives the seat as locked, or as seen when it was not locked, and
// the term held after the statement.
func pgAcquire(refresh bool) string {
	p := postgres{}
	id, identity := "CAST($2 AS uuid)", "CAST($4 AS text), CAST($5 AS bigint), CAST($6 AS text)"
	plus := "s.n + CAST($3 AS bigint) * interval '1 microsecond'"
	own := "s.leader_id = " + id + " AND s.lease_expires_at > s.n"
	q := "WITH seen AS (SELECT leader_id, term, lease_expires_at, acquired_at FROM election_leaders WHERE namespace = $1), " +
		"seat AS (SELECT leader_id, term, lease_expires_at, acquired_at FROM election_leaders " +
		"WHERE namespace = $1 AND (CAST($8 AS boolean) OR leader_id IS NULL OR leader_id = " + id + " OR lease_expires_at <= clock_timestamp()) FOR UPDATE), " +
		"s AS (SELECT clock_timestamp() AS n, k.leader_id, k.term, k.lease_expires_at, k.acquired_at FROM (SELECT 1) d LEFT JOIN seat k ON true), " +
		"c AS (INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) " +
		"SELECT $1, " + id + ", 1, " + plus + ", s.n, s.n FROM s WHERE NOT EXISTS (SELECT 1 FROM seen) " +
		"ON CONFLICT (namespace) DO NOTHING RETURNING term, lease_expires_at, acquired_at, true AS granted), " +
		"g AS (UPDATE election_leaders AS t SET leader_id = " + id + ", " +
		"term = CASE WHEN " + own + " THEN t.term ELSE t.term + 1 END, lease_expires_at = " + plus + ", " +
		"acquired_at = CASE WHEN " + own + " THEN t.acquired_at ELSE s.n END, updated_at = s.n " +
		"FROM s WHERE t.namespace = $1 AND t.term = s.term AND (s.leader_id IS NULL OR s.leader_id = " + id + " OR s.lease_expires_at <= s.n) " +
		"RETURNING t.term, t.lease_expires_at, t.acquired_at, t.term <> s.term AS granted), " +
		"w AS (SELECT * FROM g UNION ALL SELECT * FROM c), " +
		"h AS (" + insertTerm + "SELECT $1, w.term, " + id + ", " + identity + ", w.acquired_at FROM w WHERE w.granted " + termUpsert(p) + "), " +
		"x AS (UPDATE election_history AS o SET ended_at = s.lease_expires_at, end_reason = CAST($7 AS text) FROM s, w " +
		"WHERE w.granted AND o.namespace = $1 AND o.term = s.term AND s.leader_id IS NOT NULL AND o.ended_at IS NULL) "
	if refresh {
		q += ", r AS (" + insertCandidate + "SELECT $1, " + id + ", s.n, s.n, " + plus + ", " + identity + " FROM s WHERE true " +
			p.upsert(candidateKey, candidateRefresh) + ") "
	}
	return q + "SELECT s.n, s.term IS NOT NULL OR u.term IS NOT NULL, " +
		"CASE WHEN s.term IS NULL THEN u.leader_id ELSE s.leader_id END, COALESCE(s.term, u.term), " +
		"CASE WHEN s.term IS NULL THEN u.lease_expires_at ELSE s.lease_expires_at END, " +
		"CASE WHEN s.term IS NULL THEN u.acquired_at ELSE s.acquired_at END, " +
		"w.term, w.lease_expires_at, w.acquired_at, COALESCE(w.granted, false) " +
		"FROM s LEFT JOIN seen u ON true LEFT JOIN w ON true"
}

// acquirer runs Acquire's statement.
func (d postgres) acquirer() Acquirer { return pgAcquirer{d} }

type pgAcquirer struct{ d postgres }

func (a pgAcquirer) Acquire(ctx context.Context, conn gorm.ConnPool, _ *sql.DB, in AcquireArgs) (Acquired, error) {
	var r acquiredRow
	q := a.d.Statements().AcquireKept
	if in.Refresh {
		q = a.d.Statements().Acquire
	}
	err := conn.QueryRowContext(ctx, q, in.Namespace, in.ID, in.Expire.Microseconds(),
		in.Hostname, in.PID, in.Label, in.Lapsed, in.Lock).Scan(r.dest()...)
	if err != nil {
		return Acquired{}, err
	}
	return r.result(), nil
}

// vacater runs VacateNotify, in a caller's transaction too: the
// notification is then sent when that transaction commits.
func (d postgres) vacater(bool) Vacater { return pgVacater{d} }

type pgVacater struct{ d postgres }

func (v pgVacater) Vacate(ctx context.Context, conn gorm.ConnPool, _ *sql.DB, in VacateArgs) (bool, func(), error) {
	var vacated, moved bool
	err := conn.QueryRowContext(ctx, v.d.Statements().VacateNotify, in.Namespace, in.ID, in.Term, in.Unregister,
		in.Reason, in.Channel, in.Payload).Scan(&vacated, &moved)
	if err == nil && moved {
		err = ErrSeatMoved
	}
	return vacated, nil, err
}

func (postgres) Name() string { return "postgres" }

func (d postgres) Statements() *Statements {
	if d.schema == "" {
		return pgStatements
	}
	return inSchema(d.schema).statements
}
func (postgres) Rebind(q string) string { return rebindDollar(q) }
func (postgres) rebind(q string) string { return rebindDollar(q) }
func (postgres) now() string            { return "clock_timestamp()" }
func (d postgres) nowPlus() string      { return d.plus(d.now()) }
func (postgres) plus(expr string) string {
	return "(" + expr + " + CAST(? AS bigint) * interval '1 microsecond')"
}
func (postgres) DurationArg(d time.Duration) any { return d.Microseconds() }
func (postgres) TimeArg(t time.Time) any         { return t.UTC() }

func (postgres) upsertCandidate() string {
	return "ON CONFLICT (namespace, candidate_id) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at, expires_at = excluded.expires_at"
}

func (postgres) upsert(keys, cols []string) string { return onConflictUpdate(keys, cols) }

func (postgres) insertIgnore() string { return "ON CONFLICT (namespace) DO NOTHING" }

// freeBetween reads free_at, indexed (schema version 3; since version 5 it
// is NULL while a Group renews the seat, which then lapses with its member
// row: pgRound).
func (postgres) freeBetween(lo, hi string) string {
	return "l.free_at > " + lo + " AND l.free_at < " + hi
}
func (postgres) freeArgs(lo, hi any) []any { return []any{lo, hi} }

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

// renewSQL is pgRenew naming the tables of d's schema.
func (d postgres) renewSQL() string {
	if d.schema == "" {
		return pgRenew
	}
	return inSchema(d.schema).renew
}

func (d postgres) Renew(ctx context.Context, conn gorm.ConnPool, ns string, id uuid.UUID, term int64, expire time.Duration) (Renewed, bool, error) {
	var exp Time
	err := conn.QueryRowContext(ctx, d.renewSQL(), ns, id, term, expire.Microseconds()).Scan(&exp)
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
	case "42P01", "42703", "3F000": // a table or (schema version 2) a column missing; the schema missing (WithSchema before migrate.Up)
		return MissingTable
	case "25006": // read_only_sql_transaction: a standby, or default_transaction_read_only
		return ReadOnly
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return Shutdown
	case "42501": // insufficient_privilege (checked at every statement: a GRANT applies to open sessions at once)
		return Permission
	}
	return Other
}

// Denied reads the server's message of a privilege error, "permission
// denied for table election_leaders", which names the object but not the
// privilege.
func (d postgres) Denied(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || d.Classify(err) != Permission {
		return ""
	}
	if obj, ok := strings.CutPrefix(pe.Message, "permission denied for "); ok {
		return "a privilege on " + obj
	}
	return pe.Message
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
		Dialect:      postgres{},
		DriverName:   "pgx",
		DSN:          dsn,
		Pool:         serverPool,
		Connector:    pgConnector,
		ResetTimeout: pgResetTimeout(cfg, dsn),
		HostCheck:    pgHostCheck(cfg),
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
// no connect_timeout. pgx tries the hosts of a multi-host DSN in order, and
// applies ConnectTimeout to each host in turn (pgconn's connectPreferred):
// without a bound, a first host that hangs instead of refusing (a frozen VM,
// a stopped process, a black-holed route) used up every attempt's whole
// context, and a promoted replica listed second was never reached. Calls of
// package election shorten it further (WithConnectTimeout), to a tenth of
// their expiry window.
const pgConnectTimeout = 5 * time.Second

// pgKeepAlive probes an idle connection after 15 s and gives up on it after
// three unanswered probes 5 s apart, so that a pooled connection to a host
// that stopped answering is found dead within half a minute rather than the
// operating system's default of hours (Go's own default: over two minutes).
var pgKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// pgUserTimeout closes a connection whose sent data stays unacknowledged
// that long (TCP_USER_TIMEOUT, on Linux): a statement written to a host
// that went silent (a frozen VM, a cut route) fails after 10 s instead of
// waiting for the kernel's retransmissions, some fifteen minutes. Keepalives
// cover idle connections, this covers busy ones. Neither can see a host
// whose kernel still answers while its server is stopped (SIGSTOP): that is
// left to the calls' contexts and to pgResetTimeout.
const pgUserTimeout = 10 * time.Second

// pgConnector is pgx's connector for dsn, with these changes.
//
// Each host's connection attempt is bounded unless the DSN sets
// connect_timeout: by pgConnectTimeout, or the shorter bound the caller's
// context carries (WithConnectTimeout). Connections send TCP keepalives
// (pgKeepAlive) and, on Linux, give up on unacknowledged data after
// pgUserTimeout.
//
// Unless the DSN names a mode (default_query_exec_mode), statements run in
// the mode that fits what the connections reach, told by the first one
// (pgRoute): a server directly, in pgx's own default mode (cache_statement),
// and behind a connection pooler in exec mode. In cache_statement mode
// each statement is prepared under a name the first time a connection
// runs it (one round trip more, once), and then runs in one round trip
// from its prepared form: the server parses and plans the library's
// statements once per connection instead of at every call (PostgreSQL
// plans a prepared statement generically after its fifth run, when that
// plan costs no more). A leader's renewal, a statement of two tables,
// took 1.5 times a bare one-row UPDATE with the parsing and planning, and
// 1.08 times without. In exec mode each statement is sent as an unnamed
// statement with its parameters, in one round trip: a pooler in
// transaction mode (PgBouncer, and the poolers of hosted PostgreSQL) hands
// each transaction to whichever server session is free, so a named
// statement prepared through one client is found by another, or missing
// for the one that prepared it (with cache_statement only the first
// process could open the database through PgBouncer: "prepared statement
// stmtcache_... already exists", 42P05). pgx's other modes that pass a
// pooler (cache_describe, describe_exec) also send unnamed statements,
// which the server parses and plans at every call. A pool's first
// connection, made before the route is known, is made in exec mode; when
// it turns out to reach the server directly, it is closed at once and made
// again in cache_statement mode (pgBoundedConnector.Connect): one
// connection more per pool, once. With several hosts in the DSN it is
// kept in exec mode instead: made again, it would pass over the hosts
// before its own once more, each for its whole bound.
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
//
// Except behind a pooler: a new connection's first statement compares the
// process ID the server announced with pg_backend_pid(). A pooler
// announces a key of its own, and from then on the connector's cancel
// requests are not sent (the dial for one fails at once; closing the
// socket still ends the server session's transaction, since the pooler
// then drops its server connection). PgBouncer 1.18, the version Debian 12
// ships, can crash on a cancel request that arrives while the server
// connection it names is being closed (its issue 822, fixed in 1.19); a
// fault that cancels many rounds at once made it do so under the chaos
// soak.
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
	// A multi-host DSN's first connection is not made again: the second
	// attempt would pass over the same silent or refusing hosts, each for
	// its whole bound, as the first did.
	route := &pgRoute{modeSet: modeSet, oneHost: !strings.Contains(pgHosts(pc), ",")}
	if !modeSet {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	// connect_timeout=0 (wait for ever) is the user's choice too.
	bound := !pgConnectTimeoutSet(pc, dsn)
	if bound {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	opts := []stdlib.OptionOpenDB{stdlib.OptionBeforeConnect(func(ctx context.Context, c *pgx.ConnConfig) error {
		if d, ok := connectTimeoutFrom(ctx); bound && ok && d < c.ConnectTimeout {
			c.ConnectTimeout = d
		}
		if !modeSet && route.state.Load() == routeDirect {
			c.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
		}
		return nil
	})}
	dialer := &net.Dialer{KeepAliveConfig: pgKeepAlive, Control: tcpUserTimeout(pgUserTimeout)}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ctx.Value(connectingKey{}) == nil && route.pooled() {
			route.withheld.Add(1)
			return nil, errCancelNotSent
		}
		return dialer.DialContext(ctx, network, addr)
	}
	opts = append(opts, stdlib.OptionAfterConnect(route.check))
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler { return closeOnCancel{c} }
	return pgBoundedConnector{stdlib.GetConnector(*cfg, opts...), route, newDialSlots()}, nil
}

// connectingKey marks the context of a connection attempt, so that the
// dial function can tell it from the dial of a cancel request, which pgx
// makes under a context of its own.
type connectingKey struct{}

// errCancelNotSent is the dial of a cancel request refused behind a pooler.
var errCancelNotSent = errors.New("cancel request not sent through a connection pooler")

// pgRoute records what the connector's connections were found to reach:
// the server itself, or a pooler in front of it.
type pgRoute struct {
	state    atomic.Int32 // routeUnknown, routeDirect or routePooled
	withheld atomic.Int64 // cancel requests not sent
	modeSet  bool         // the DSN names the exec mode: the route does not choose it
	oneHost  bool         // the DSN names one host: the first connection may be made again
}

const (
	routeUnknown int32 = iota
	routeDirect
	routePooled
)

func (r *pgRoute) pooled() bool { return r.state.Load() == routePooled }

// check runs on each new connection until one has answered: a server
// announces its own process ID in BackendKeyData, a pooler a key of its
// own. A connection whose check fails is closed and the attempt fails with
// the check's error; the route stays unknown and the next connection asks
// again.
func (r *pgRoute) check(ctx context.Context, c *pgx.Conn) error {
	if r.state.Load() != routeUnknown {
		return nil
	}
	var pid uint32
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		_ = c.Close(ctx) // pgx's connector leaves a connection it refuses open
		return err
	}
	if pid == c.PgConn().PID() {
		r.state.Store(routeDirect)
	} else {
		r.state.Store(routePooled)
	}
	return nil
}

// pgBoundedConnector makes a connection attempt that ran out of its bound
// match context.DeadlineExceeded, as the caller's own deadline would: the
// socket closed by closeOnCancel otherwise only says "use of closed network
// connection".
//
// It also paces the attempts (dialSlots): at most pgDialLimit in flight.
type pgBoundedConnector struct {
	driver.Connector
	route *pgRoute
	slots dialSlots
}

func (c pgBoundedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.slots.connect(ctx, func(actx context.Context) (driver.Conn, error) {
		before := c.route.state.Load()
		conn, err := c.Connector.Connect(context.WithValue(actx, connectingKey{}, true))
		if err == nil && !c.route.modeSet && c.route.oneHost && before == routeUnknown && c.route.state.Load() == routeDirect {
			// Made in exec mode before the route was known, to a server
			// that it reaches directly: made again in cache_statement mode.
			_ = conn.Close()
			conn, err = c.Connector.Connect(context.WithValue(actx, connectingKey{}, true))
		}
		return conn, err
	})
	if err != nil && ctx.Err() == nil && (errors.Is(err, net.ErrClosed) || pgconn.Timeout(err)) && !errors.Is(err, context.DeadlineExceeded) {
		err = connectTimedOut{err}
	}
	return conn, err
}

// connectTimedOut is a connection attempt that ran out of its bound.
type connectTimedOut struct{ err error }

func (e connectTimedOut) Error() string {
	return "connection attempt timed out: " + e.err.Error()
}

func (e connectTimedOut) Unwrap() []error { return []error{context.DeadlineExceeded, e.err} }

// pgConnectTimeoutSet reports whether dsn sets connect_timeout itself.
func pgConnectTimeoutSet(pc *pgconn.Config, dsn string) bool {
	return pc.ConnectTimeout != 0 || strings.Contains(strings.ToLower(dsn), "connect_timeout=")
}

// pgResetTimeout bounds the check pgx makes of a pooled connection when it
// hands it out after more than a second unused (a ping): the bound of a
// connection attempt (the DSN's connect_timeout, else the caller's bound or
// pgConnectTimeout). A pooled connection to a host that stopped answering
// is then discarded after that long instead of holding its caller, whose
// context may have no deadline (a leader's work), until the host returns.
//
// A DSN's connect_timeout=0 waits for ever, here too: the bound is 0, which
// means none (the check runs under the caller's context alone), and no host
// is judged silent.
func pgResetTimeout(pc *pgconn.Config, dsn string) func(context.Context) time.Duration {
	if pgConnectTimeoutSet(pc, dsn) {
		d := pc.ConnectTimeout
		return func(context.Context) time.Duration { return d }
	}
	return func(ctx context.Context) time.Duration {
		if d, ok := connectTimeoutFrom(ctx); ok && d < pgConnectTimeout {
			return d
		}
		return pgConnectTimeout
	}
}

// pgHostCheck finds pgx connections to a silent host: a new connection to
// the same address, with cfg's credentials and no target_session_attrs
// check, that gets no answer within the bound.
//
// Hosts are matched by the address the DSN writes (a host name is not
// resolved): a multi-host DSN of IP addresses, or of names whose sockets
// report the same text, gets its passed-over hosts checked.
func pgHostCheck(cfg *pgconn.Config) *HostCheck {
	hosts := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))))
	}
	netConn := func(conn driver.Conn) net.Conn {
		if sc, ok := UnwrapConn(conn).(*stdlib.Conn); ok {
			return sc.Conn().PgConn().Conn()
		}
		return nil
	}
	return &HostCheck{
		Addr: func(conn driver.Conn) string {
			if nc := netConn(conn); nc != nil && nc.RemoteAddr() != nil {
				return nc.RemoteAddr().String()
			}
			return ""
		},
		Silent: func(ctx context.Context, addr string, d time.Duration) bool {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return false
			}
			p, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				return false
			}
			c := cfg.Copy()
			c.Host, c.Port, c.Fallbacks, c.ValidateConnect, c.ConnectTimeout = host, uint16(p), nil, nil, d
			dialer := &net.Dialer{}
			c.DialFunc = dialer.DialContext
			conn, err := pgconn.ConnectConfig(ctx, c)
			if err == nil {
				conn.Close(ctx)
				return false
			}
			var pe *pgconn.PgError
			return !errors.As(err, &pe) && ctx.Err() == nil && pgconn.Timeout(err)
		},
		Sever: func(conn driver.Conn) {
			if nc := netConn(conn); nc != nil {
				nc.Close()
			}
		},
		Passed: func(conn driver.Conn) []string {
			nc := netConn(conn)
			if nc == nil || nc.RemoteAddr() == nil || len(hosts) < 2 {
				return nil
			}
			at := slices.Index(hosts, nc.RemoteAddr().String())
			if at <= 0 {
				return nil
			}
			return hosts[:at]
		},
	}
}

// closeOnCancel ends a connection the moment its call's context ends,
// instead of pgx's default of sending a cancel request over a new
// connection first: the server then releases the locks the session holds at
// once. It sets the socket's deadline to now, so that the call's read or
// write fails with a timeout, which pgx reports as the context's error and
// answers by closing the connection; closeBackstop later it closes the
// socket itself, in case no call was reading. (Closing it at once would
// race with the deadline, and a call losing that race would report "use of
// closed network connection" instead of the context's error.)
type closeOnCancel struct{ c *pgconn.PgConn }

// closeBackstop is how long after a cancelled call closeOnCancel closes the
// socket itself.
const closeBackstop = 250 * time.Millisecond

func (h closeOnCancel) HandleCancel(context.Context) {
	conn := h.c.Conn()
	_ = conn.SetDeadline(time.Now())
	time.AfterFunc(closeBackstop, func() { conn.Close() })
}

func (closeOnCancel) HandleUnwatchAfterCancel() {}

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
