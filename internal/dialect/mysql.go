package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// mysql is MySQL, MariaDB and TiDB through go-sql-driver/mysql. NOW(6) is
// fixed when a statement starts and so is stale after a lock wait;
// SYSDATE(6) is read when evaluated and, with the session time zone at UTC,
// is the clock used.
//
// tidb is set for TiDB (Detect tells it by a variable of its own), where
// three things differ: a shared row lock is a no-op unless a server setting
// makes it real, so the guard's lock is FOR UPDATE; the session must run
// pessimistic transactions, in which FOR UPDATE blocks, with SYSDATE() read
// when evaluated (checkTiDB refuses the settings that change either); and
// handoff listeners are found by their statement (mysql_notify.go).
//
// galera is set for a MariaDB or MySQL node of a Galera cluster (wsrep_on).
// Row locks there are the node's own and are not replicated: a transaction
// on another node can change a row this node's transaction has locked, and
// certification at commit only compares the rows each transaction wrote.
// So the guard writes the seat row (Fence), and migrations tolerate
// another node applying the same version at the same time.
//
// compound is set for MariaDB, which runs anonymous compound statements:
// Elect and the vacating calls are then one round trip each (mariadb.go).
type mysql struct{ tidb, galera, compound bool }

var _ Dialect = mysql{}

var (
	myStatements   = build(mysql{})
	tidbStatements = build(mysql{tidb: true})
)

func (mysql) Name() string { return "mysql" }

func (d mysql) Statements() *Statements {
	if d.tidb {
		return tidbStatements
	}
	return myStatements
}

// TiDB reports whether d is the MySQL dialect talking to TiDB.
func TiDB(d Dialect) bool {
	m, ok := d.(mysql)
	return ok && m.tidb
}

// Galera reports whether d is the MySQL dialect talking to a node of a
// Galera cluster.
func Galera(d Dialect) bool {
	m, ok := d.(mysql)
	return ok && m.galera
}

// detect tells TiDB from MySQL and MariaDB by a variable only TiDB has,
// tidb_txn_mode (VERSION() is whatever TiDB's server-version setting makes
// it), a Galera node by wsrep_on, and MariaDB by its version and a compound
// statement (detectCompound).
func (d mysql) detect(ctx context.Context, db *gorm.DB) (Dialect, error) {
	vars, err := showVariables(func() (*sql.Rows, error) {
		return db.WithContext(ctx).Raw("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('tidb_txn_mode', 'wsrep_on', 'version')").Rows()
	})
	if err != nil {
		return nil, err
	}
	if _, ok := vars["tidb_txn_mode"]; ok {
		return mysql{tidb: true}, nil
	}
	return mysql{galera: strings.EqualFold(vars["wsrep_on"], "ON"), compound: detectCompound(ctx, db, vars["version"])}, nil
}

// showVariables reads the name and value columns of a SHOW VARIABLES that
// query runs. SHOW answers on every server, with no row for a variable the
// server does not have.
func showVariables(query func() (*sql.Rows, error)) (map[string]string, error) {
	rows, err := query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		vars[strings.ToLower(name)] = value
	}
	return vars, rows.Err()
}

// myFence writes the seat row when the candidate holds it in the term,
// moving updated_at on by at least a microsecond so that the row changes
// (an update that changes nothing writes nothing, and would not be
// certified).
const myFence = "UPDATE election_leaders SET updated_at = GREATEST(SYSDATE(6), updated_at + INTERVAL 1 MICROSECOND) " +
	"WHERE namespace = ? AND leader_id = ? AND term = ?"

func (d mysql) fence(ctx context.Context, conn gorm.ConnPool, ns string, id uuid.UUID, term int64) error {
	if !d.galera {
		return nil
	}
	_, err := conn.ExecContext(ctx, myFence, ns, id, term)
	return err
}

// migrationRace reports whether err, from a migration step on a Galera
// node, is what a step already applied through another node gives: the
// table, column or index exists (or, for a drop, is gone), the version is
// recorded, or certification lost to the other node's statement.
func (d mysql) migrationRace(err error) bool {
	var me *drv.MySQLError
	if !d.galera || !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1050, 1060, 1061, 1062, 1091, 1213:
		return true
	}
	return false
}

func (mysql) Rebind(q string) string          { return q }
func (mysql) rebind(q string) string          { return q }
func (mysql) now() string                     { return "SYSDATE(6)" }
func (d mysql) nowPlus() string               { return d.plus(d.now()) }
func (mysql) plus(expr string) string         { return "(" + expr + " + INTERVAL ? MICROSECOND)" }
func (mysql) DurationArg(d time.Duration) any { return d.Microseconds() }
func (mysql) TimeArg(t time.Time) any         { return t.UTC() }

func (mysql) upsertCandidate() string {
	return "ON DUPLICATE KEY UPDATE last_heartbeat_at = VALUES(last_heartbeat_at), expires_at = VALUES(expires_at)"
}

func (mysql) upsert(_, cols []string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = VALUES(" + c + ")"
	}
	return "ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}

func (mysql) insertIgnore() string { return "ON DUPLICATE KEY UPDATE namespace = namespace" }

// freeBetween reads the lease's end, or the last change of a vacant seat,
// through the index on (lease_expires_at, updated_at) (schema version 6):
// two ranges of it. The virtual column free_at, the same value, is no
// longer indexed: on MariaDB an index on a virtual column makes InnoDB's
// purge open the table to compute it, and a purge worker was seen looping
// there (open_purge_table) while the server's memory grew by some 250 MB a
// second until the kernel killed it (docs/reliability.md, Findings).
func (mysql) freeBetween(lo, hi string) string {
	return "(l.lease_expires_at > " + lo + " AND l.lease_expires_at < " + hi +
		" OR l.lease_expires_at IS NULL AND l.updated_at > " + lo + " AND l.updated_at < " + hi + ")"
}
func (mysql) freeArgs(lo, hi any) []any { return []any{lo, hi, lo, hi} }

func (d mysql) selectLeader(lock Lock) string {
	suffix := ""
	switch {
	case lock == ShareLock && d.tidb:
		// TiDB ignores shared locks, or refuses them, unless
		// tidb_enable_shared_lock_promotion (8.3 and later) turns them into
		// exclusive ones: take the exclusive lock, whatever the setting.
		suffix = " FOR UPDATE"
	case lock == ShareLock:
		// Understood by MySQL and MariaDB alike, unlike FOR SHARE.
		suffix = " LOCK IN SHARE MODE"
	case lock == UpdateLock:
		suffix = " FOR UPDATE"
	}
	return "SELECT SYSDATE(6), l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT 1) d " +
		"LEFT JOIN election_leaders l ON l.namespace = ?" + suffix
}

// myRenew renews the lease and refreshes the candidate row in one statement.
// The new expiry, as microseconds since the epoch, travels back in the OK
// packet through LAST_INSERT_ID(expr), saving the round trip a read would
// cost. STRAIGHT_JOIN locks the leader row before the candidate row, the order
// every other statement uses, on MySQL and MariaDB; TiDB locks in an order of
// its own, and the rare deadlock with UnregisterCandidate is retried. The new
// times come from one reading of the clock (t.n: LIMIT 1 makes TiDB evaluate
// the derived table once, as MySQL and MariaDB do anyway), so the lease and
// the candidate row expire together; the liveness test reads the clock
// afresh, after the lock.
const myRenew = `UPDATE (SELECT SYSDATE(6) AS n LIMIT 1) t STRAIGHT_JOIN election_leaders l STRAIGHT_JOIN election_candidates c
  ON c.namespace = l.namespace AND c.candidate_id = l.leader_id
SET l.lease_expires_at = TIMESTAMP('1970-01-01') + INTERVAL LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', t.n) + ?) MICROSECOND,
  l.updated_at = t.n,
  c.last_heartbeat_at = t.n,
  c.expires_at = t.n + INTERVAL ? MICROSECOND
WHERE l.namespace = ? AND l.leader_id = ? AND l.term = ? AND l.lease_expires_at > SYSDATE(6)`

var unixEpoch = time.Unix(0, 0).UTC()

func (mysql) Renew(ctx context.Context, conn gorm.ConnPool, ns string, id uuid.UUID, term int64, expire time.Duration) (Renewed, bool, error) {
	us := expire.Microseconds()
	res, err := conn.ExecContext(ctx, myRenew, us, us, ns, id, term)
	if err != nil {
		return Renewed{}, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Renewed{}, false, err
	}
	if n == 0 {
		return Renewed{}, false, nil
	}
	exp, err := res.LastInsertId()
	if err != nil {
		return Renewed{}, false, err
	}
	return Renewed{ExpiresAt: unixEpoch.Add(time.Duration(exp) * time.Microsecond)}, true, nil
}

func (mysql) Classify(err error) Class {
	var me *drv.MySQLError
	if !errors.As(err, &me) {
		return Other
	}
	switch me.Number {
	case 1213, 1205, 1020:
		return Transient
	case 9007, 8022, 8028, 9001, 9002, 9003, 9004, 9005, 9006:
		// TiDB: a write conflict, a transaction to retry, a schema change
		// during the statement, and its storage layer busy or unreachable
		// for a moment.
		return Transient
	case 1146, 1054: // a table or (schema version 2) a column missing
		return MissingTable
	case 1290, 1792: // --read-only (read_only) prevents the statement; a READ ONLY transaction
		return ReadOnly
	case 1053: // server shutdown in progress
		return Shutdown
	case 1142, 1143, 1044: // a privilege missing on a table, on a column, on the database
		return Permission
	}
	return Other
}

// sessionGrants reports that a session sees a GRANT of privileges on its
// current database only once it runs USE again (MySQL and MariaDB: an open
// session keeps the database privileges it had when it selected the
// database; table and column privileges apply at once). Discard therefore
// drops a connection that lacked a privilege. TiDB reloads privileges for
// every session, but is not told apart here: dropping such a connection
// costs it a new one.
func (mysql) sessionGrants() bool { return true }

// Denied reads the server's message of a privilege error: "INSERT, UPDATE
// command denied to user 'app'@'10.0.0.5' for table `app`.`election_leaders`"
// (1142; MySQL writes the table name alone), "... for column 'c' in table
// 't'" (1143), "Access denied for user 'app'@'10.0.0.5' to database 'app'"
// (1044).
func (d mysql) Denied(err error) string {
	var me *drv.MySQLError
	if !errors.As(err, &me) || d.Classify(err) != Permission {
		return ""
	}
	msg := me.Message
	if i := strings.Index(msg, " command denied to user "); i > 0 {
		if j := strings.Index(msg[i:], " for "); j > 0 {
			return msg[:i] + " on " + msg[i+j+len(" for "):]
		}
		return msg[:i]
	}
	if i := strings.Index(msg, " to database "); i > 0 {
		return "access to database " + msg[i+len(" to database "):]
	}
	return msg
}

func (d mysql) Check(ctx context.Context, db *gorm.DB) (*sql.TxOptions, error) {
	if d, ok := db.Dialector.(*gormmysql.Dialector); ok && d.DSNConfig != nil && d.DSNConfig.Loc != nil {
		if _, off := time.Now().In(d.DSNConfig.Loc).Zone(); off != 0 {
			return nil, fmt.Errorf("%w: the mysql driver reads times in %s; add loc=UTC to the DSN", ErrUnsafeSettings, d.DSNConfig.Loc)
		}
	}
	var (
		now      Time
		probe    any
		offsetUS int64
	)
	// The offset at microsecond precision: at whole seconds, a server that
	// rounds one timestamp and truncates the other (TiDB) is a second off
	// half the time.
	row := db.WithContext(ctx).Raw("SELECT SYSDATE(6), SYSDATE(6), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), NOW(6))").Row()
	if err := row.Scan(&now, &probe, &offsetUS); err != nil {
		return nil, err
	}
	if _, isTime := probe.(time.Time); !isTime {
		return nil, fmt.Errorf("%w: the mysql driver returns timestamps as text; add parseTime=true to the DSN", ErrUnsafeSettings)
	}
	if offset := (time.Duration(offsetUS) * time.Microsecond).Round(time.Second); offset != 0 {
		return nil, fmt.Errorf("%w: the session time zone is %+d s from UTC; add time_zone=%%27%%2B00%%3A00%%27 (time_zone='+00:00') to the DSN", ErrUnsafeSettings, int64(offset/time.Second))
	}
	if d.tidb {
		if err := checkTiDB(ctx, db); err != nil {
			return nil, err
		}
	}
	// REPEATABLE READ takes gap locks on the missing leader row of a new
	// namespace, and concurrent first elections then deadlock. Elect's own
	// transactions run at READ COMMITTED unless the session already does.
	var level string
	if err := db.WithContext(ctx).Raw("SELECT @@SESSION.transaction_isolation").Row().Scan(&level); err != nil {
		if err := db.WithContext(ctx).Raw("SELECT @@SESSION.tx_isolation").Row().Scan(&level); err != nil {
			return nil, err
		}
	}
	if strings.EqualFold(level, "READ-COMMITTED") {
		return nil, nil
	}
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}, nil
}

// checkTiDB refuses the TiDB session settings under which elections are not
// safe, naming the setting:
//
//   - tidb_txn_mode other than pessimistic: in optimistic mode FOR UPDATE
//     blocks nobody and conflicts surface only at commit, so the seat would
//     not be locked while a round decides.
//   - tidb_sysdate_is_now=ON: SYSDATE() is then NOW(), fixed when the
//     statement starts, and the clock a statement reads after waiting for
//     the seat's lock would be as old as the wait.
//
// tidb_enable_noop_functions is not refused: it turns what TiDB cannot do
// (LOCK IN SHARE MODE, START TRANSACTION READ ONLY, SQL_CALC_FOUND_ROWS,
// GROUP BY ... ASC|DESC) into no-ops, and the library sends none of them to
// TiDB: Guard's lock is FOR UPDATE there.
func checkTiDB(ctx context.Context, db *gorm.DB) error {
	vars, err := showVariables(func() (*sql.Rows, error) {
		return db.WithContext(ctx).Raw("SHOW SESSION VARIABLES WHERE Variable_name IN ('tidb_txn_mode', 'tidb_sysdate_is_now')").Rows()
	})
	if err != nil {
		return err
	}
	if mode := vars["tidb_txn_mode"]; !strings.EqualFold(mode, "pessimistic") {
		return fmt.Errorf("%w: TiDB's tidb_txn_mode is %q; elections need pessimistic transactions, in which FOR UPDATE blocks: "+
			"add tidb_txn_mode=%%27pessimistic%%27 to the DSN (session.Open does)", ErrUnsafeSettings, mode)
	}
	if v := vars["tidb_sysdate_is_now"]; strings.EqualFold(v, "ON") || v == "1" {
		return fmt.Errorf("%w: TiDB's tidb_sysdate_is_now is ON, which makes SYSDATE() the time its statement started, "+
			"stale after a wait for the seat's lock; set it OFF, its default (add tidb_sysdate_is_now=OFF to the DSN)", ErrUnsafeSettings)
	}
	return nil
}

const myMigrationLock = "sqlelect.migrate"

func (mysql) LockMigrations(ctx context.Context, conn *sql.Conn) (func(bool) error, error) {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", myMigrationLock).Scan(&got); err != nil {
		return nil, fmt.Errorf("taking the migration lock: %w", err)
	}
	if got.Int64 != 1 {
		return nil, errors.New("taking the migration lock: timed out after 60s")
	}
	return func(bool) error {
		_, err := conn.ExecContext(context.Background(), "SELECT RELEASE_LOCK(?)", myMigrationLock)
		return err
	}, nil
}

func openMySQL(dsn string) (Opened, error) {
	cfg, err := drv.ParseDSN(dsn)
	if err != nil {
		return Opened{}, fmt.Errorf("%w: %v", ErrDSN, scrubMySQL(err.Error(), dsn))
	}
	return openMySQLConfig(cfg)
}

// openMySQLConfig applies what elections need to a parsed driver DSN.
func openMySQLConfig(cfg *drv.Config) (Opened, error) {
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// One round trip a statement instead of prepare, execute and close.
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	target := Target{Database: "mysql", Where: fmt.Sprintf("%s (database %q, user %q)", cfg.Addr, cfg.DBName, cfg.User), Secret: cfg.Passwd}
	return Opened{
		Dialect:    mysql{},
		DriverName: "mysql",
		DSN:        cfg.FormatDSN(),
		Pool:       serverPool,
		Target:     target,
		AfterOpen: func(db *sql.DB) (string, error) {
			// READ COMMITTED for every transaction, so that concurrent first
			// elections do not deadlock on gap locks. MariaDB before 11.1 and
			// MySQL before 5.7.20 only know the variable as tx_isolation.
			_, hasMode := cfg.Params["tidb_txn_mode"]
			if hasIsolation(cfg.Params) && hasMode {
				return "", nil
			}
			// The version tells MariaDB's name of the variable; TiDB is
			// told by a variable of its own.
			vars, err := showVariables(func() (*sql.Rows, error) {
				return db.Query("SHOW VARIABLES WHERE Variable_name IN ('version', 'tidb_txn_mode')")
			})
			if err != nil {
				return "", err
			}
			_, tidb := vars["tidb_txn_mode"]
			changed := false
			if !hasIsolation(cfg.Params) {
				name := "transaction_isolation"
				if strings.Contains(strings.ToLower(vars["version"]), "mariadb") {
					name = "tx_isolation"
				}
				cfg.Params[name] = "'READ-COMMITTED'"
				changed = true
			}
			if !hasMode && tidb {
				// Pessimistic transactions, whatever the cluster's default:
				// Check refuses optimistic ones.
				cfg.Params["tidb_txn_mode"] = "'pessimistic'"
				changed = true
			}
			if !changed {
				return "", nil
			}
			return cfg.FormatDSN(), nil
		},
	}, nil
}

func hasIsolation(params map[string]string) bool {
	_, a := params["tx_isolation"]
	_, b := params["transaction_isolation"]
	return a || b
}

// openMySQLURL opens what follows mysql:// in a DSN: the driver's own form
// when it names the network (user:pass@tcp(host:port)/db), otherwise a URL
// as providers print it, user:pass@host:port/db?params, with the user and
// password URL-escaped.
func openMySQLURL(rest string) (Opened, error) {
	if mysqlDriverForm(rest) {
		return openMySQL(rest)
	}
	u, err := url.Parse("mysql://" + rest)
	if err != nil {
		// url.Error quotes the whole URL; its cause alone says what is wrong.
		var ue *url.Error
		msg := "mysql URL does not parse"
		if errors.As(err, &ue) {
			msg += ": " + ue.Err.Error()
		}
		pw := ""
		if at := strings.LastIndex(rest, "@"); at > 0 {
			if _, p, ok := strings.Cut(rest[:at], ":"); ok {
				pw = p
			}
		}
		return Opened{}, fmt.Errorf("%w: %s", ErrDSN, scrubPassword(msg, pw))
	}
	if u.Opaque != "" || u.Fragment != "" {
		return Opened{}, fmt.Errorf("%w: mysql URL: want mysql://user:pass@host:port/db (escape '#', '/' and '?' in the password)", ErrDSN)
	}
	// The driver's form without the user information, so that a password
	// holding '@', ':' or '/' needs no escaping of the driver's kind.
	addr := u.Host
	if addr != "" && u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	form := "/" + strings.TrimPrefix(u.Path, "/")
	if addr != "" {
		form = "tcp(" + addr + ")" + form
	}
	if u.RawQuery != "" {
		form += "?" + u.RawQuery
	}
	cfg, err := drv.ParseDSN(form)
	if err != nil {
		return Opened{}, fmt.Errorf("%w: %v", ErrDSN, err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return openMySQLConfig(cfg)
}

// scrubMySQL removes the password part of a driver DSN from a parse error.
func scrubMySQL(msg, dsn string) string {
	if at := strings.LastIndex(dsn, "@"); at > 0 {
		if colon := strings.Index(dsn[:at], ":"); colon >= 0 && colon+1 < at {
			msg = scrubPassword(msg, dsn[colon+1:at])
		}
	}
	return msg
}

func (mysql) Gorm(pool *sql.DB) gorm.Dialector {
	return gormmysql.New(gormmysql.Config{Conn: pool})
}

func (mysql) CacheStatements() bool { return false }
