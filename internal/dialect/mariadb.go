package dialect

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// MariaDB's fast path (see Acquirer, Vacater): Elect and the vacating
// calls as anonymous compound statements, BEGIN NOT ATOMIC ... END, one
// round trip each, where MySQL and TiDB take a transaction of several.
//
// A compound statement is one statement for the client and the protocol,
// whose body the server runs as a stored procedure's: local variables,
// IF, and START TRANSACTION ... COMMIT inside. Its exit handler rolls
// the transaction back before it re-raises any error, so a statement that
// fails (a deadlock, a lock wait timeout, an interruption) never leaves
// its pooled connection inside a transaction; a connection lost midway has
// its transaction rolled back by the server. The parameters are bound in
// the DECLAREs (the driver interpolates them, as session.Open asks; without
// interpolation it prepares the statement, which MariaDB also accepts),
// and the statement body holds no other '?'. MySQL and TiDB have no
// compound statements outside stored programs: detect finds them only on
// MariaDB, where it runs one to be sure.

// mariaCompoundProbe is the compound statement detect runs: a bound
// parameter read back.
const mariaCompoundProbe = "BEGIN NOT ATOMIC DECLARE v BIGINT DEFAULT ?; SELECT v; END"

// detectCompound reports whether db's server runs anonymous compound
// statements with bound parameters, as MariaDB does since 10.1; version is
// the server's version string.
func detectCompound(ctx context.Context, db *gorm.DB, version string) bool {
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		return false
	}
	var v int64
	err := db.WithContext(ctx).Raw(mariaCompoundProbe, 7).Row().Scan(&v)
	return err == nil && v == 7
}

// The declarations every compound statement's parameters share the types
// of: the columns they are compared with and written to.
const (
	mariaNamespace = "VARBINARY(191)"
	mariaID        = "CHAR(36) CHARACTER SET ascii COLLATE ascii_bin"
	mariaText      = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	mariaReason    = "VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin"
	mariaRollback  = "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END; "
)

// mariaGrantArgs declares the parameters a compound statement that grants
// terms takes after its namespace or namespaces, in this order: the
// candidate id, the expiry window in microseconds, hostname, pid, label,
// and the end reason of a lapsed term.
var mariaGrantArgs = "DECLARE v_id " + mariaID + " DEFAULT ?; " +
	"DECLARE v_us BIGINT DEFAULT ?; " +
	"DECLARE v_host " + mariaText + " DEFAULT ?; " +
	"DECLARE v_pid BIGINT DEFAULT ?; " +
	"DECLARE v_label " + mariaText + " DEFAULT ?; " +
	"DECLARE v_lapsed " + mariaReason + " DEFAULT ?; "

// mariaAcquire is Acquire on MariaDB, refreshing the candidate's row when
// asked. It reads the seat and the clock without a lock; when another
// candidate holds a live lease (and v_lock does not ask for the lock), it
// refreshes the candidate's row and yields that reading. Otherwise, in a
// transaction, it locks the seat (reading the clock after the lock), creates a missing row in term 1 (a row created by
// another caller at the same moment is locked and decided on instead, the
// protocol's retry), renews the candidate's own live lease, or grants a
// vacant or lapsed seat in the next term (ending a lapsed term at its
// expiry and recording the new one), refreshes the candidate's row with
// the same times, and commits. The row yielded is the seat as last read
// (locked when it was locked) and the term held after the statement.
func mariaAcquire(refresh bool) string {
	q := "BEGIN NOT ATOMIC " +
		"DECLARE v_ns " + mariaNamespace + " DEFAULT ?; " +
		mariaGrantArgs +
		"DECLARE v_lock BOOLEAN DEFAULT ?; " +
		"DECLARE v_now, v_exp, v_acq, n_exp, n_acq DATETIME(6) DEFAULT NULL; " +
		"DECLARE v_leader " + mariaID + " DEFAULT NULL; " +
		"DECLARE v_term, n_term BIGINT DEFAULT NULL; " +
		"DECLARE n_granted BOOLEAN DEFAULT FALSE; " +
		mariaRollback +
		"SELECT SYSDATE(6), l.leader_id, l.term, l.lease_expires_at, l.acquired_at INTO v_now, v_leader, v_term, v_exp, v_acq " +
		"FROM (SELECT 1) d LEFT JOIN election_leaders l ON l.namespace = v_ns; " +
		"IF v_lock OR v_leader IS NULL OR v_leader = v_id OR v_exp <= v_now THEN " +
		"START TRANSACTION; " +
		"SELECT SYSDATE(6), l.leader_id, l.term, l.lease_expires_at, l.acquired_at INTO v_now, v_leader, v_term, v_exp, v_acq " +
		"FROM (SELECT 1) d LEFT JOIN election_leaders l ON l.namespace = v_ns FOR UPDATE; " +
		"IF v_term IS NULL THEN " +
		"INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) " +
		"VALUES (v_ns, v_id, 1, v_now + INTERVAL v_us MICROSECOND, v_now, v_now) ON DUPLICATE KEY UPDATE namespace = namespace; " +
		"IF ROW_COUNT() = 1 THEN " +
		"SET n_term = 1, n_exp = v_now + INTERVAL v_us MICROSECOND, n_acq = v_now, n_granted = TRUE; " +
		"ELSE " +
		"SELECT SYSDATE(6), l.leader_id, l.term, l.lease_expires_at, l.acquired_at INTO v_now, v_leader, v_term, v_exp, v_acq " +
		"FROM (SELECT 1) d LEFT JOIN election_leaders l ON l.namespace = v_ns FOR UPDATE; " +
		"END IF; " +
		"END IF; " +
		"IF n_term IS NULL AND v_term IS NOT NULL THEN " +
		"IF v_leader = v_id AND v_exp > v_now THEN " +
		"UPDATE election_leaders SET lease_expires_at = v_now + INTERVAL v_us MICROSECOND, updated_at = v_now WHERE namespace = v_ns; " +
		"SET n_term = v_term, n_exp = v_now + INTERVAL v_us MICROSECOND, n_acq = v_acq; " +
		"ELSEIF v_leader IS NULL OR v_exp <= v_now THEN " +
		"UPDATE election_leaders SET leader_id = v_id, term = term + 1, lease_expires_at = v_now + INTERVAL v_us MICROSECOND, " +
		"acquired_at = v_now, updated_at = v_now WHERE namespace = v_ns; " +
		"SET n_term = v_term + 1, n_exp = v_now + INTERVAL v_us MICROSECOND, n_acq = v_now, n_granted = TRUE; " +
		"IF v_leader IS NOT NULL THEN " +
		"UPDATE election_history SET ended_at = v_exp, end_reason = v_lapsed WHERE namespace = v_ns AND term = v_term AND ended_at IS NULL; " +
		"END IF; " +
		"END IF; " +
		"END IF; " +
		"IF n_granted THEN " +
		"INSERT INTO election_history (namespace, term, leader_id, hostname, pid, label, acquired_at) " +
		"VALUES (v_ns, n_term, v_id, v_host, v_pid, v_label, n_acq) " +
		"ON DUPLICATE KEY UPDATE leader_id = VALUES(leader_id), hostname = VALUES(hostname), pid = VALUES(pid), label = VALUES(label), " +
		"acquired_at = VALUES(acquired_at), ended_at = NULL, end_reason = NULL; " +
		"END IF; " +
		"END IF; "
	if refresh {
		q += "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at, hostname, pid, label) " +
			"VALUES (v_ns, v_id, v_now, v_now, v_now + INTERVAL v_us MICROSECOND, v_host, v_pid, v_label) " +
			"ON DUPLICATE KEY UPDATE last_heartbeat_at = VALUES(last_heartbeat_at), expires_at = VALUES(expires_at), " +
			"hostname = VALUES(hostname), pid = VALUES(pid), label = VALUES(label); "
	}
	return q + "COMMIT; " +
		"SELECT v_now, v_term IS NOT NULL, v_leader, v_term, v_exp, v_acq, n_term, n_exp, n_acq, n_granted; " +
		"END"
}

// mariaAcquireSQL is mariaAcquire, with the refresh of the candidate's
// row (1) and without (0).
var mariaAcquireSQL = [2]string{mariaAcquire(false), mariaAcquire(true)}

// mariaVacate is the vacating part of Vacate on MariaDB: in a
// transaction, the seat locked if the candidate holds it (in the term
// given, unless 0), cleared, the term recorded as ended, and the
// candidate's row deleted when asked; then the number of seats cleared and,
// when there was one, the listeners to wake (mariaVacateListeners).
const mariaVacate = "BEGIN NOT ATOMIC " +
	"DECLARE v_ns " + mariaNamespace + " DEFAULT ?; " +
	"DECLARE v_id " + mariaID + " DEFAULT ?; " +
	"DECLARE v_term BIGINT DEFAULT ?; " +
	"DECLARE v_unregister BOOLEAN DEFAULT ?; " +
	"DECLARE v_reason " + mariaReason + " DEFAULT ?; " +
	"DECLARE v_channel VARCHAR(64) CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_held BIGINT DEFAULT NULL; " +
	"DECLARE v_n INT DEFAULT 0; " +
	mariaRollback +
	"START TRANSACTION; " +
	"SELECT l.term INTO v_held FROM (SELECT 1) d LEFT JOIN election_leaders l " +
	"ON l.namespace = v_ns AND l.leader_id = v_id AND v_term IN (0, l.term) FOR UPDATE; " +
	"IF v_held IS NOT NULL THEN " +
	"UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = SYSDATE(6) WHERE namespace = v_ns; " +
	"UPDATE election_history SET ended_at = SYSDATE(6), end_reason = v_reason " +
	"WHERE namespace = v_ns AND term = v_held AND leader_id = v_id AND ended_at IS NULL; " +
	"SET v_n = 1; " +
	"END IF; " +
	"IF v_unregister THEN DELETE FROM election_candidates WHERE namespace = v_ns AND candidate_id = v_id; END IF; " +
	"COMMIT; "

// mariaVacateListeners ends mariaVacate and mariaVacateSeats with a row:
// the first column, then the columns myUsedSQL reads (the connection id,
// the server, the holder of every wake-up slot of the channel), the slots
// read only when the variable count, the number of seats cleared, is above
// 0.
func mariaVacateListeners(first, count string) string {
	var b strings.Builder
	b.WriteString("SELECT " + first + ", CONNECTION_ID(), " + myServerCols)
	for i := range mySlotCount {
		fmt.Fprintf(&b, ", IF(%s > 0, IS_USED_LOCK(CONCAT(x.p, %d)), NULL)", count, i)
	}
	b.WriteString(" FROM (SELECT CONCAT(v_channel, ':', CRC32(COALESCE(DATABASE(), '')), ':') AS p) x; END")
	return b.String()
}

// acquirer is MariaDB's Acquirer; MySQL and TiDB have none.
func (d mysql) acquirer() Acquirer {
	if !d.compound {
		return nil
	}
	return mariaAcquirer{}
}

type mariaAcquirer struct{}

func (mariaAcquirer) Acquire(ctx context.Context, conn gorm.ConnPool, _ *sql.DB, in AcquireArgs) (Acquired, error) {
	var r acquiredRow
	q := mariaAcquireSQL[0]
	if in.Refresh {
		q = mariaAcquireSQL[1]
	}
	err := conn.QueryRowContext(ctx, q, in.Namespace, in.ID, in.Expire.Microseconds(),
		in.Hostname, in.PID, in.Label, in.Lapsed, in.Lock).Scan(r.dest()...)
	if err != nil {
		return Acquired{}, err
	}
	return r.result(), nil
}

// vacater is MariaDB's Vacater, outside a caller's transaction: a
// compound statement holds a transaction of its own.
func (d mysql) vacater(callerTx bool) Vacater {
	if !d.compound || callerTx {
		return nil
	}
	return mariaVacater{d}
}

type mariaVacater struct{ d mysql }

// mariaVacateSQL is mariaVacate with its listeners.
var mariaVacateSQL = mariaVacate + mariaVacateListeners("v_n", "v_n")

func (v mariaVacater) Vacate(ctx context.Context, conn gorm.ConnPool, pool *sql.DB, in VacateArgs) (bool, func(), error) {
	var (
		n       int64
		srv     myServer
		holders []myHolder
	)
	err := scanSlots(func() (*sql.Rows, error) {
		return conn.QueryContext(ctx, mariaVacateSQL, in.Namespace, in.ID, in.Term, in.Unregister, in.Reason, myName(in.Channel))
	}, []any{&n}, &srv, &holders)
	if err != nil || n == 0 {
		return false, nil, err
	}
	return true, func() { v.d.wake(ctx, pool, myName(in.Channel), srv, holders, in.Payload) }, nil
}
