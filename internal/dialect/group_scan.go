package dialect

import (
	"database/sql"
	"time"

	"github.com/google/uuid"
)

// roundCols is the shape of a round's rows, which scan reads.
type roundCols int

const (
	// readCols: db_now, namespace, leader_id, term, lease_expires_at,
	// acquired_at, the live count (readSeats).
	readCols roundCols = iota
	// pgCols: as readCols, with the renewal's new expiry before the live
	// count and, after it, whether the member row was kept, the rows
	// the renewal changed and whether a range was truncated (pgRound).
	pgCols
	// mariaCols: as readCols, then whether the member row was kept, the
	// rows the renewal changed, and the clock the statement read first
	// (mariaRoundSQL).
	mariaCols
)

// scan reads a round's rows, in the shape cols, and returns the rows the
// renewal changed (pgCols, mariaCols) and the clock the statement read
// first (mariaCols). A row of NULLs but the clock and the counts stands
// for no seat, and a row with a namespace but no term for a namespace
// without a leader row (Exists false), as does each namespace of in.Read
// without a row.
func (out *RoundOut) scan(rows *sql.Rows, in RoundIn, cols roundCols) (changed int64, began time.Time, err error) {
	defer rows.Close()
	seen := make(map[string]bool, len(in.Read))
	// One set of destinations for every row, each overwritten by the
	// next Scan (a NULL resets it): declared in the loop, they were a
	// dozen allocations a row, half of what a round of a thousand seats
	// allocated.
	var (
		now, exp, acq, rexp Time
		first               Time
		ns                  sql.NullString
		leader              uuid.NullUUID
		term                sql.NullInt64
		live, kept, chg     sql.NullInt64
		cut                 sql.NullBool
	)
	dest := []any{&now, &ns, &leader, &term, &exp, &acq}
	switch cols {
	case pgCols:
		dest = append(dest, &rexp, &live, &kept, &chg, &cut)
	case mariaCols:
		dest = append(dest, &live, &kept, &chg, &first)
	default:
		dest = append(dest, &live)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return 0, time.Time{}, err
		}
		out.Now, out.Live, out.Lapsed, changed, began = now.Time, int(live.Int64), cols != readCols && kept.Int64 == 0, chg.Int64, first.Time
		out.Truncated = cut.Bool
		if !ns.Valid || seen[ns.String] {
			continue
		}
		seen[ns.String] = true
		out.Seats = append(out.Seats, RoundSeat{Namespace: ns.String, Exists: term.Valid, Leader: leader, Term: term.Int64, Expires: exp, Acquired: acq})
		if rexp.Valid {
			out.Renewed[ns.String] = rexp.Time
		}
	}
	if err := rows.Err(); err != nil {
		return 0, time.Time{}, err
	}
	for _, ns := range in.Read {
		if !seen[ns] {
			seen[ns] = true
			out.Seats = append(out.Seats, RoundSeat{Namespace: ns})
		}
	}
	return changed, began, nil
}
