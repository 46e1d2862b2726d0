package dialect

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// mariaTakeMax is the most namespaces one of MariaDB's batch takes
// carries: their array travels as one JSON text, and the seats it locks
// are gathered into another.
const mariaTakeMax = 1024

// mariaTake is TakeSeats on MariaDB, one compound statement (see
// mariadb.go) whose transaction runs at READ COMMITTED, so that reading
// the leader rows takes no gap locks, whatever the session's level:
//
//  1. It locks every existing seat of the namespaces (a JSON array) that
//     reads vacant or lapsed, skipping the rows another transaction has
//     locked (a renewal, a vacate, another take), and gathers them: it
//     never waits for a leader's renewal nor makes one wait.
//  2. It reads the clock, after those locks.
//  3. It inserts, in namespace order, the namespaces with no row, in term
//  1. One another caller inserted meanwhile is left to it (the no-op
//     update changes nothing, and the row is not the member's).
//  4. It ends each lapsed term of the locked seats at its expiry, with
//     the end reason given, and grants the locked seats in their next
//     term (the clock read after the lock still finds them free).
//  5. It records every term granted in the history, and commits.
//
// It then returns the seats granted: the namespace's rows that the
// member holds from the statement's clock on (no other caller grants a
// term at that very microsecond to this member). Parameters: the
// namespaces (a JSON array), member id, expiry window in microseconds,
// hostname, pid, label, the end reason of a lapsed term.
var mariaTake = "BEGIN NOT ATOMIC " +
	"DECLARE v_nss LONGTEXT CHARACTER SET utf8mb4 DEFAULT ?; " +
	mariaGrantArgs +
	"DECLARE v_free LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL; " +
	"DECLARE v_n BIGINT DEFAULT 0; " +
	"DECLARE v_now DATETIME(6) DEFAULT NULL; " +
	mariaRollback +
	"SET TRANSACTION ISOLATION LEVEL READ COMMITTED; " +
	"START TRANSACTION; " +
	mariaLockSeats("v_free", "l.leader_id IS NULL OR l.lease_expires_at <= SYSDATE(6)", "SKIP LOCKED") +
	"SET v_now = SYSDATE(6); " +
	"INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) " +
	"SELECT w.ns, v_id, 1, v_now + INTERVAL v_us MICROSECOND, v_now, v_now FROM " + mariaJSONTable("v_nss") + " " +
	"WHERE NOT EXISTS (SELECT 1 FROM election_leaders e WHERE e.namespace = w.ns) ORDER BY w.ns " +
	"ON DUPLICATE KEY UPDATE namespace = election_leaders.namespace; " +
	"IF v_n > 0 THEN " +
	"UPDATE election_history h JOIN election_leaders l ON h.namespace = l.namespace AND h.term = l.term " +
	"JOIN " + mariaJSONTable("v_free") + " ON l.namespace = w.ns " +
	"SET h.ended_at = l.lease_expires_at, h.end_reason = v_lapsed " +
	"WHERE l.leader_id IS NOT NULL AND l.lease_expires_at <= v_now AND h.ended_at IS NULL; " +
	"UPDATE election_leaders l JOIN " + mariaJSONTable("v_free") + " ON l.namespace = w.ns " +
	"SET l.leader_id = v_id, l.term = l.term + 1, l.lease_expires_at = v_now + INTERVAL v_us MICROSECOND, " +
	"l.acquired_at = v_now, l.updated_at = v_now " +
	"WHERE l.leader_id IS NULL OR l.lease_expires_at <= v_now; " +
	"END IF; " +
	"INSERT INTO election_history (namespace, term, leader_id, hostname, pid, label, acquired_at) " +
	"SELECT l.namespace, l.term, v_id, v_host, v_pid, v_label, v_now FROM election_leaders l " + mariaGranted + " " +
	"ON DUPLICATE KEY UPDATE leader_id = VALUES(leader_id), hostname = VALUES(hostname), pid = VALUES(pid), label = VALUES(label), " +
	"acquired_at = VALUES(acquired_at), ended_at = NULL, end_reason = NULL; " +
	"COMMIT; " +
	"SELECT l.namespace, l.term, l.lease_expires_at, l.acquired_at FROM election_leaders l " + mariaGranted + "; " +
	"END"

// mariaGranted joins the rows l of election_leaders to the namespaces of
// v_nss and keeps those mariaTake granted: held by the member from the
// statement's clock on.
var mariaGranted = "JOIN " + mariaJSONTable("v_nss") + " ON l.namespace = w.ns WHERE l.leader_id = v_id AND l.acquired_at = v_now"

// mariaLockSeats is the part of a batch statement that locks the seats of
// the namespaces in v_nss whose row matches where (FOR UPDATE, then the
// option given: SKIP LOCKED, or none to wait for the locks) and gathers
// their namespaces into the JSON array into, their number into v_n. The
// array is as long as it needs to be, whatever the session's
// group_concat_max_len, and its count checks it.
func mariaLockSeats(into, where, option string) string {
	return "SET STATEMENT group_concat_max_len = 4294967295 FOR " +
		"SELECT JSON_ARRAYAGG(CONVERT(l.namespace USING utf8mb4)), COUNT(*) INTO " + into + ", v_n " +
		"FROM election_leaders l JOIN " + mariaJSONTable("v_nss") + " ON l.namespace = w.ns " +
		"WHERE " + where + " FOR UPDATE " + option + "; " +
		"IF v_n > 0 AND (JSON_VALID(" + into + ") = 0 OR JSON_LENGTH(" + into + ") <> v_n) THEN " +
		"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlelect: the locked seats did not fit their array'; " +
		"END IF; "
}

// mariaJSONTable is the JSON array of namespaces in variable v as a
// table w with one column, ns.
func mariaJSONTable(v string) string {
	return "JSON_TABLE(" + v + ", '$[*]' COLUMNS (ns " + mariaNamespace + " PATH '$')) w"
}

// mariaTakeSeats runs mariaTake over nss, at most mariaTakeMax of them.
func mariaTakeSeats(ctx context.Context, conn gorm.ConnPool, member uuid.UUID, nss []string, expire time.Duration,
	hostname string, pid int, label, expired string) ([]RoundSeat, error) {
	if len(nss) > mariaTakeMax {
		return nil, fmt.Errorf("dialect: %d namespaces in one take, more than %d", len(nss), mariaTakeMax)
	}
	arr, err := json.Marshal(nss)
	if err != nil {
		return nil, err
	}
	rows, err := conn.QueryContext(ctx, mariaTake, string(arr), member, expire.Microseconds(), hostname, int64(pid), label, expired)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var grants []RoundSeat
	for rows.Next() {
		s := RoundSeat{Exists: true, Leader: uuid.NullUUID{UUID: member, Valid: true}}
		if err := rows.Scan(&s.Namespace, &s.Term, &s.Expires, &s.Acquired); err != nil {
			return nil, err
		}
		grants = append(grants, s)
	}
	return grants, rows.Err()
}

// mariaVacateSeats is VacateSeats on MariaDB: in a transaction at READ
// COMMITTED, the seats of the namespaces (a JSON array, in namespace
// order) that the candidate holds are locked, waiting for the locks, and
// gathered; their terms are recorded as ended with the reason given, the
// seats cleared and the candidate's rows of every namespace deleted; then
// the seats cleared (a JSON array, NULL when none) and the listeners to
// wake, as mariaVacate ends. Parameters: candidate id, the namespaces,
// end reason, channel.
var mariaVacateSeats = "BEGIN NOT ATOMIC " +
	"DECLARE v_id " + mariaID + " DEFAULT ?; " +
	"DECLARE v_nss LONGTEXT CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_reason " + mariaReason + " DEFAULT ?; " +
	"DECLARE v_channel VARCHAR(64) CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_held LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL; " +
	"DECLARE v_n BIGINT DEFAULT 0; " +
	"DECLARE v_now DATETIME(6) DEFAULT NULL; " +
	mariaRollback +
	"SET TRANSACTION ISOLATION LEVEL READ COMMITTED; " +
	"START TRANSACTION; " +
	mariaLockSeats("v_held", "l.leader_id = v_id", "") +
	"SET v_now = SYSDATE(6); " +
	"IF v_n > 0 THEN " +
	"UPDATE election_history h JOIN election_leaders l ON h.namespace = l.namespace AND h.term = l.term " +
	"JOIN " + mariaJSONTable("v_held") + " ON l.namespace = w.ns " +
	"SET h.ended_at = v_now, h.end_reason = v_reason WHERE l.leader_id = v_id AND h.leader_id = v_id AND h.ended_at IS NULL; " +
	"UPDATE election_leaders l JOIN " + mariaJSONTable("v_held") + " ON l.namespace = w.ns " +
	"SET l.leader_id = NULL, l.lease_expires_at = NULL, l.updated_at = v_now WHERE l.leader_id = v_id; " +
	"END IF; " +
	"DELETE c FROM election_candidates c JOIN " + mariaJSONTable("v_nss") + " ON c.namespace = w.ns WHERE c.candidate_id = v_id; " +
	"COMMIT; "

// mariaVacateSeats runs mariaVacateSeats, then notifies each vacancy: to
// this process's listeners with its payload, and to the others' by one
// interruption, after which they run a round.
func (d mysql) mariaVacateSeats(ctx context.Context, conn gorm.ConnPool, a SeatsVacate) ([]string, error) {
	nss := slices.Clone(a.Namespaces)
	slices.Sort(nss)
	arr, err := json.Marshal(nss)
	if err != nil {
		return nil, err
	}
	var (
		held    sql.NullString
		srv     myServer
		holders []myHolder
	)
	err = scanSlots(func() (*sql.Rows, error) {
		return conn.QueryContext(ctx, mariaVacateSeats+mariaVacateListeners("v_held", "v_n"), a.ID, string(arr), a.Reason, myName(a.Channel))
	}, []any{&held}, &srv, &holders)
	if err != nil || !held.Valid {
		return nil, err
	}
	var vacated []string
	if err := json.Unmarshal([]byte(held.String), &vacated); err != nil {
		return nil, fmt.Errorf("dialect: the seats vacated: %w", err)
	}
	payload := make(map[string]string, len(a.Namespaces))
	for i, ns := range a.Namespaces {
		payload[ns] = a.Payloads[i]
	}
	var payloads []string
	for _, ns := range vacated {
		payloads = append(payloads, payload[ns])
	}
	d.wake(ctx, a.Pool, myName(a.Channel), srv, holders, payloads...)
	return vacated, nil
}
