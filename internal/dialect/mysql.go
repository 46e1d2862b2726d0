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

// mysql is MySQL and MariaDB through go-sql-driver/mysql. NOW(6) is fixed when
// a statement starts and so is stale after a lock wait; SYSDATE(6) is read
// when evaluated and, with the session time zone at UTC, is the clock used.
type mysql struct{}

var _ Dialect = mysql{}

var myStatements = build(mysql{})

func (mysql) Name() string                    { return "mysql" }
func (mysql) Statements() *Statements         { return myStatements }
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

func (mysql) insertIgnore() string { return "ON DUPLICATE KEY UPDATE namespace = namespace" }

func (mysql) selectLeader(lock Lock) string {
	suffix := ""
	switch lock {
	case ShareLock:
		// Understood by MySQL and MariaDB alike, unlike FOR SHARE.
		suffix = " LOCK IN SHARE MODE"
	case UpdateLock:
		suffix = " FOR UPDATE"
	}
	return "SELECT SYSDATE(6), l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT 1) d " +
		"LEFT JOIN election_leaders l ON l.namespace = ?" + suffix
}

// myRenew renews the lease and refreshes the candidate row in one statement.
// The new expiry, as microseconds since the epoch, travels back in the OK
// packet through LAST_INSERT_ID(expr), saving the round trip a read would
// cost. STRAIGHT_JOIN locks the leader row before the candidate row, the order
// every other statement uses. The new times come from one reading of the
// clock (t.n), so the lease and the candidate row expire together; the
// liveness test reads the clock afresh, after the lock.
const myRenew = `UPDATE (SELECT SYSDATE(6) AS n) t STRAIGHT_JOIN election_leaders l STRAIGHT_JOIN election_candidates c
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
	case 1146:
		return MissingTable
	}
	return Other
}

func (mysql) Check(ctx context.Context, db *gorm.DB) (*sql.TxOptions, error) {
	if d, ok := db.Dialector.(*gormmysql.Dialector); ok && d.DSNConfig != nil && d.DSNConfig.Loc != nil {
		if _, off := time.Now().In(d.DSNConfig.Loc).Zone(); off != 0 {
			return nil, fmt.Errorf("%w: the mysql driver reads times in %s; add loc=UTC to the DSN", ErrUnsafeSettings, d.DSNConfig.Loc)
		}
	}
	var (
		now    Time
		probe  any
		offset int64
	)
	row := db.WithContext(ctx).Raw("SELECT SYSDATE(6), SYSDATE(6), TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())").Row()
	if err := row.Scan(&now, &probe, &offset); err != nil {
		return nil, err
	}
	if _, isTime := probe.(time.Time); !isTime {
		return nil, fmt.Errorf("%w: the mysql driver returns timestamps as text; add parseTime=true to the DSN", ErrUnsafeSettings)
	}
	if offset != 0 {
		return nil, fmt.Errorf("%w: the session time zone is %+d s from UTC; add time_zone=%%27%%2B00%%3A00%%27 (time_zone='+00:00') to the DSN", ErrUnsafeSettings, offset)
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
			if hasIsolation(cfg.Params) {
				return "", nil
			}
			var version string
			if err := db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
				return "", err
			}
			name := "transaction_isolation"
			if strings.Contains(strings.ToLower(version), "mariadb") {
				name = "tx_isolation"
			}
			cfg.Params[name] = "'READ-COMMITTED'"
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
