package dialect

import (
	"context"
	"database/sql"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// SeatsVacate are the arguments of VacateSeats.
type SeatsVacate struct {
	// ID is the candidate whose seats are vacated and whose candidate rows
	// are deleted.
	ID uuid.UUID
	// Namespaces are the seats to vacate, whatever the term ID holds
	// there; Payloads the notification of each, in the same order.
	Namespaces, Payloads []string
	// Reason is the end reason recorded in the history; Channel the
	// notification channel.
	Reason, Channel string
	// Pool is the pool through which MariaDB's vacate interrupts other
	// processes' listeners, when none has listened on the server (see
	// Vacater).
	Pool *sql.DB
}

// VacateSeats is, on PostgreSQL and MariaDB, VacateNotify for many seats
// of one candidate in one statement (Term 0, Unregister): every seat of
// a.Namespaces that a.ID holds is cleared, its term recorded as ended and
// its vacancy notified, and the candidate's rows there are deleted. It
// returns the namespaces vacated, and on PostgreSQL those the candidate
// held in the statement's snapshot whose row changed while the statement
// waited for its lock (moved: left as they are, to vacate one at a time,
// as VacateNotify's ErrSeatMoved); MariaDB's locking read sees the rows as
// they are once locked, and reports none moved. ok is false on the other
// databases, which vacate one seat at a time. It runs outside any
// transaction, and returns once the vacancies are notified.
func VacateSeats(ctx context.Context, conn gorm.ConnPool, d Dialect, a SeatsVacate) (vacated, moved []string, ok bool, err error) {
	switch d := d.(type) {
	case postgres:
	case mysql:
		if !d.compound {
			return nil, nil, false, nil
		}
		vacated, err := d.mariaVacateSeats(ctx, conn, a)
		return vacated, nil, true, err
	default:
		return nil, nil, false, nil
	}
	rows, err := conn.QueryContext(ctx, finish(d, pgVacateSeats), a.ID, TextArray(a.Namespaces), TextArray(a.Payloads), a.Reason, a.Channel)
	if err != nil {
		return nil, nil, true, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ns    string
			clear bool
		)
		if err := rows.Scan(&ns, &clear); err != nil {
			return nil, nil, true, err
		}
		if clear {
			vacated = append(vacated, ns)
		} else {
			moved = append(moved, ns)
		}
	}
	return vacated, moved, true, rows.Err()
}

// VacatesSeatsAtOnce reports whether d vacates many seats of a candidate
// in one statement (VacateSeats).
func VacatesSeatsAtOnce(d Dialect) bool {
	switch d := d.(type) {
	case postgres:
		return true
	case mysql:
		return d.compound
	}
	return false
}

// pgVacateSeats is VacateSeats' statement, pgVacateNotify over arrays.
// Parameters: the candidate id, the namespaces and their payloads (text
// arrays), the end reason, the channel. One row per seat the candidate
// held in the snapshot: its namespace, and whether v cleared it. As in
// pgVacateNotify, v clears a seat only in the term seen reads in the
// snapshot, so that h ends the history row of the term it cleared; n is
// read by the SELECT, or it would not run.
const pgVacateSeats = `WITH t AS (
  SELECT * FROM unnest(CAST($2 AS text[]), CAST($3 AS text[])) AS t(ns, payload)
), seen AS (
  SELECT l.namespace, l.term FROM election_leaders l JOIN t ON l.namespace = t.ns WHERE l.leader_id = $1
), v AS (
  UPDATE election_leaders AS u SET leader_id = NULL, lease_expires_at = NULL, updated_at = clock_timestamp()
  FROM seen WHERE u.namespace = seen.namespace AND u.leader_id = $1 AND u.term = seen.term
  RETURNING u.namespace, u.term
), d AS (
  DELETE FROM election_candidates AS c USING t WHERE c.namespace = t.ns AND c.candidate_id = $1
), h AS (
  UPDATE election_history AS x SET ended_at = clock_timestamp(), end_reason = $4 FROM v
  WHERE x.namespace = v.namespace AND x.term = v.term AND x.leader_id = $1 AND x.ended_at IS NULL
), n AS (
  SELECT pg_notify($5, t.payload) FROM v JOIN t ON t.ns = v.namespace
)
SELECT s.namespace, v.namespace IS NOT NULL FROM seen s LEFT JOIN v ON v.namespace = s.namespace
WHERE (SELECT count(*) FROM n) >= 0`
