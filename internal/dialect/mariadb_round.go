package dialect

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// mariaRoundSQL is a Group's round on MariaDB: one compound statement
// (see mariadb.go), one round trip, as PostgreSQL's round is one
// statement, where MySQL and TiDB send two or more. It runs outside any
// transaction, in the order GroupRound gives:
//
//  1. It reads the clock, and whether the member row was live, or
//     expired for less than a window, before this round refreshes it
//     (RoundOut.Lapsed).
//  2. In one transaction, one commit as the one UPDATE of MySQL's round:
//     it renews the held leases (a JSON array of [namespace, term]
//     pairs, in namespace order, the order every batch locks seats in)
//     that the member still holds live in their term, to that reading
//     plus the expiry window, counting the rows changed, then creates or
//     refreshes the member row. The renewal comes first: it must answer
//     within the trust window. An error rolls the transaction back.
//  3. It writes the candidate rows joined since the last round, pointing
//     to the member row, in namespace order, committing by itself.
//  4. With namespaces sampled, it counts the live candidates of each; the
//     most of one, plus the member, is the live count.
//  5. It reads the clock again, and the seats: those of the namespaces
//     where the member has a candidate row (the joined ones, written by
//     this round or before it) whose lease ends within the horizon or
//     that became free lately (through the index on (lease_expires_at,
//     updated_at), between two constants, then one probe of the candidate
//     row's key a seat), and
//     those read whatever their state, by key; then the live count, the
//     member row's state before the refresh, the rows the renewal
//     changed, and the clock's first reading.
//
// Its leading comment names the number of namespaces, as PostgreSQL's
// does (GroupRoundNamespaces). Parameters: member id, hostname, pid,
// label, expiry window in microseconds, then JSON arrays of the
// namespaces to join, the held leases, the sampled namespaces and
// those read whatever their state, then the horizon and the time since a
// seat became free (negative), in microseconds.
var mariaRoundSQL = "BEGIN NOT ATOMIC " +
	"DECLARE v_id " + mariaID + " DEFAULT ?; " +
	"DECLARE v_host " + mariaText + " DEFAULT ?; " +
	"DECLARE v_pid BIGINT DEFAULT ?; " +
	"DECLARE v_label " + mariaText + " DEFAULT ?; " +
	"DECLARE v_us BIGINT DEFAULT ?; " +
	"DECLARE v_join LONGTEXT CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_held LONGTEXT CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_sample LONGTEXT CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_read LONGTEXT CHARACTER SET utf8mb4 DEFAULT ?; " +
	"DECLARE v_horizon BIGINT DEFAULT ?; " +
	"DECLARE v_since BIGINT DEFAULT ?; " +
	"DECLARE v_now DATETIME(6) DEFAULT SYSDATE(6); " +
	"DECLARE v_at DATETIME(6) DEFAULT NULL; " +
	"DECLARE v_lo DATETIME(6) DEFAULT NULL; " +
	"DECLARE v_hi DATETIME(6) DEFAULT NULL; " +
	"DECLARE v_changed BIGINT DEFAULT 0; " +
	"DECLARE v_kept BIGINT DEFAULT 0; " +
	"DECLARE v_live BIGINT DEFAULT 0; " +
	mariaRollback +
	"SELECT COUNT(*) INTO v_kept FROM election_members WHERE member_id = v_id AND expires_at >= v_now - INTERVAL v_us MICROSECOND; " +
	"START TRANSACTION; " +
	"IF v_held <> '[]' THEN " +
	"UPDATE election_leaders l JOIN " + mariaHeldTable + " ON l.namespace = h.ns AND l.term = h.term " +
	"SET l.lease_expires_at = v_now + INTERVAL v_us MICROSECOND, l.updated_at = v_now " +
	"WHERE l.leader_id = v_id AND l.lease_expires_at > SYSDATE(6); " +
	"SET v_changed = ROW_COUNT(); " +
	"END IF; " +
	"INSERT INTO election_members (member_id, hostname, pid, label, registered_at, last_heartbeat_at, expires_at) " +
	"VALUES (v_id, v_host, v_pid, v_label, v_now, v_now, v_now + INTERVAL v_us MICROSECOND) " +
	mysql{}.upsert(nil, memberKeep) + "; " +
	"COMMIT; " +
	"IF v_join <> '[]' THEN " +
	insertMemberCandidate + "SELECT w.ns, v_id, v_now, v_now, v_now, v_host, v_pid, v_label, v_id FROM " + mariaJSONTable("v_join") + " " +
	"ORDER BY w.ns " + mysql{}.upsert(nil, joinKeep) + "; " +
	"END IF; " +
	"IF v_sample <> '[]' THEN " +
	"SELECT COALESCE(MAX(x.k), 0) + 1 INTO v_live FROM (SELECT COUNT(*) AS k FROM " + mariaJSONTable("v_sample") + " " +
	"JOIN election_candidates e ON e.namespace = w.ns" + withMember("e") +
	" WHERE " + liveCandidate("e", "SYSDATE(6)") + " AND e.candidate_id <> v_id GROUP BY w.ns) x; " +
	"END IF; " +
	"SET v_at = SYSDATE(6), v_lo = v_at + INTERVAL v_since MICROSECOND, v_hi = v_at + INTERVAL v_horizon MICROSECOND; " +
	"SELECT v_at, s.namespace, s.leader_id, s.term, s.lease_expires_at, s.acquired_at, v_live, v_kept, v_changed, v_now " +
	"FROM (SELECT 1 AS one) t LEFT JOIN (" +
	"SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM election_leaders l " +
	"WHERE " + mysql{}.freeBetween("v_lo", "v_hi") + " " +
	"AND EXISTS (SELECT 1 FROM election_candidates e WHERE e.namespace = l.namespace AND e.candidate_id = v_id) " +
	"UNION SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM " + mariaJSONTable("v_read") + " " +
	"JOIN election_leaders l ON l.namespace = w.ns" +
	") s ON 1; " +
	"END"

// mariaHeldTable is the JSON array of held leases in v_held, pairs of
// namespace and term, as a table h with columns ns and term.
const mariaHeldTable = "JSON_TABLE(v_held, '$[*]' COLUMNS (ns " + mariaNamespace + " PATH '$[0]', term BIGINT PATH '$[1]')) h"

// mariaRound is mariaRoundSQL over n namespaces, led by its comment.
func mariaRound(n int) string {
	return roundTag + strconv.Itoa(n) + " namespaces */ " + mariaRoundSQL
}

// mariaGroupRound runs mariaRoundSQL: GroupRound on MariaDB.
func mariaGroupRound(ctx context.Context, conn gorm.ConnPool, in RoundIn) (RoundOut, error) {
	out := RoundOut{Renewed: map[string]time.Time{}}
	held := make([][2]any, len(in.Held))
	for i, h := range in.Held {
		held[i] = [2]any{h.Namespace, h.Term}
	}
	slices.SortFunc(held, func(a, b [2]any) int { return strings.Compare(a[0].(string), b[0].(string)) })
	args := []any{in.Member, in.Hostname, int64(in.PID), in.Label, in.Expire.Microseconds()}
	for _, v := range []any{in.Join, held, in.Sample, in.Read} {
		arr, err := json.Marshal(v)
		if err != nil {
			return out, err
		}
		if string(arr) == "null" {
			arr = []byte("[]")
		}
		args = append(args, string(arr))
	}
	args = append(args, in.Horizon.Microseconds(), -in.Lapsed.Microseconds())
	out.Sent = time.Now()
	rows, err := conn.QueryContext(ctx, mariaRound(in.Joined), args...)
	if err != nil {
		return out, err
	}
	changed, began, err := out.scan(rows, in, mariaCols)
	if err != nil {
		return out, err
	}
	// Sent stands for the local time at which the reading was sent, Now
	// for the clock it read: the time a lease has left counts from Sent
	// (a follower tries at a lease's edge by it). The reading came after
	// the renewal's commit: Sent moves on by the time the statement took
	// before it, by the database clock, so that an edge is not tried
	// early by that much, as it would be from the statement's start.
	if d := out.Now.Sub(began); d > 0 {
		out.Sent = out.Sent.Add(d)
	}
	// The reading began after the renewal committed: a held seat that
	// reads held by the member in its term and live was renewed, which
	// only this renewal can have made it, a term never returning to a
	// candidate once it left.
	seats := make(map[string]RoundSeat, len(out.Seats))
	for _, s := range out.Seats {
		seats[s.Namespace] = s
	}
	for _, h := range in.Held {
		s := seats[h.Namespace]
		if s.Leader.Valid && s.Leader.UUID == in.Member && s.Term == h.Term && s.Expires.Time.After(out.Now) {
			out.Renewed[h.Namespace] = s.Expires.Time
		}
	}
	if int64(len(out.Renewed)) > changed {
		// More leases read as renewed than the renewal changed rows: a
		// reading that cannot be trusted.
		clear(out.Renewed)
		out.Doubtful = true
	}
	return out, nil
}
