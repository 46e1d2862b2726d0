package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// SQLite's fast path (see Acquirer, Vacater). SQLite writes one table per
// statement, so the writes of a grant (the seat, the history, the
// candidate's row) are several statements; they run in one call of the
// driver, BEGIN IMMEDIATE to COMMIT, on a connection taken from the pool
// for the call. When the call fails, the connection is rolled back, or
// discarded when that fails too, before it goes back to the pool: it never
// goes back inside a transaction.
//
// Elect reads the seat first, without a lock (a statement of its own, kept
// prepared); another candidate's live lease ends it there, with the
// candidate's row refreshed. Otherwise the call's writes are guarded by
// what the reading showed: the seat is granted only if it is still in the
// term read and, by the clock read under the database's write lock, still
// vacant or lapsed (the candidate's own live lease is renewed only if it is
// still live and would not be shortened), and the history is written only
// for the grant that call made. The times written are the reading's: as
// the database's clock is read before the write lock is granted, a grant
// that waited for the lock has a lease that ends that much sooner, never
// later. The driver reports the rows the last write changed, which tells
// whether the grant, or the renewal, was made.

// detect reports, on db's pool, whether the driver runs several statements
// in one call, binding the arguments in order (detectMulti), and reads the
// path of the database's file, for the notifications of Vacate.
func (d sqlite) detect(ctx context.Context, db *gorm.DB) (Dialect, error) {
	pool, err := db.DB()
	if err != nil || sqliteDriverUsable(sqliteDriverOf(db)) != nil {
		return d, nil // Check says what is wrong
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	file, err := sqliteFile(ctx, conn)
	if err != nil {
		return nil, err
	}
	d.file, d.fileKnown = file, true
	d.multi, d.numbered = detectMulti(ctx, conn)
	return d, nil
}

// detectMulti runs two inserts of bound values into a temporary table in
// one call and reads back what they wrote: a driver that runs only the
// first statement, or refuses the call, fails the check. It tries the
// arguments taken in order (?) first, then by number (?1, ?2).
func detectMulti(ctx context.Context, conn *sql.Conn) (multi, numbered bool) {
	const table = "temp.sqlelect_multi_probe"
	defer func() { _, _ = conn.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) }()
	probe := func(numbered bool) bool {
		q := "CREATE TEMP TABLE IF NOT EXISTS sqlelect_multi_probe (x INTEGER); DELETE FROM " + table +
			"; INSERT INTO " + table + " VALUES (?); INSERT INTO " + table + " VALUES (?)"
		if numbered {
			q = numberParams(q)
		}
		if _, err := conn.ExecContext(ctx, q, 3, 4); err != nil {
			return false
		}
		var n, sum int64
		err := conn.QueryRowContext(ctx, "SELECT count(*), total(x) FROM "+table).Scan(&n, &sum)
		return err == nil && n == 2 && sum == 7
	}
	if probe(false) {
		return true, false
	}
	if probe(true) {
		return true, true
	}
	return false, false
}

// numberParams numbers the ? placeholders of q, outside quoted text, in
// order from ?1: for a driver that binds each statement of a call to the
// call's arguments by number.
func numberParams(q string) string {
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("?" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func (d sqlite) acquirer() Acquirer {
	if !d.multi {
		return nil
	}
	return sqliteAcquirer{numbered: d.numbered}
}

type sqliteAcquirer struct{ numbered bool }

func (a sqliteAcquirer) Acquire(ctx context.Context, conn gorm.ConnPool, pool *sql.DB, in AcquireArgs) (Acquired, error) {
	q := sqliteStatements
	var (
		now, exp, acq Time
		term          sql.NullInt64
		out           Acquired
	)
	err := conn.QueryRowContext(ctx, q.SelectLeader[NoLock], in.Namespace).Scan(&now, &out.Seat.Leader, &term, &exp, &acq)
	if err != nil {
		return Acquired{}, err
	}
	out.Now, out.Seat.Exists, out.Seat.Term, out.Seat.ExpiresAt, out.Seat.AcquiredAt = now.Time, term.Valid, term.Int64, exp, acq
	held := out.Seat.Leader.Valid && exp.Valid
	live := held && exp.Time.After(now.Time)
	at := now.Time.Truncate(time.Microsecond)
	until := at.Add(in.Expire).Truncate(time.Microsecond)
	d := sqlite{}
	nowArg, expArg := d.TimeArg(at), d.TimeArg(until)
	if live && out.Seat.Leader.UUID != in.ID {
		if in.Lock {
			// A handoff said the seat is changing hands: the caller's
			// locked path waits for the vacating transaction.
			out.Undecided = true
			return out, nil
		}
		if !in.Refresh {
			return out, nil
		}
		_, err := conn.ExecContext(ctx, q.UpsertAt, in.Namespace, in.ID, nowArg, nowArg, expArg, in.Hostname, in.PID, in.Label)
		return out, err
	}
	if pool == nil {
		out.Undecided = true
		return out, nil
	}

	var (
		b    strings.Builder
		args []any
	)
	b.WriteString("BEGIN IMMEDIATE; ")
	if in.Refresh {
		b.WriteString(q.UpsertAt + "; ")
		args = append(args, in.Namespace, in.ID, nowArg, nowArg, expArg, in.Hostname, in.PID, in.Label)
	}
	recordTerm := func(term int64) {
		b.WriteString(insertTerm + "SELECT namespace, term, leader_id, ?, ?, ?, acquired_at FROM election_leaders " +
			"WHERE namespace = ? AND leader_id = ? AND term = ? AND acquired_at = ? " + termUpsert(d) + "; ")
		args = append(args, in.Hostname, in.PID, in.Label, in.Namespace, in.ID, term, nowArg)
	}
	newTerm, granted := out.Seat.Term+1, true
	switch {
	case !out.Seat.Exists:
		b.WriteString("INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) " +
			"VALUES (?, ?, 1, ?, ?, ?) ON CONFLICT (namespace) DO NOTHING; ")
		args = append(args, in.Namespace, in.ID, expArg, nowArg, nowArg)
		newTerm = 1
		recordTerm(newTerm)
	case live:
		// The candidate's own live lease: renewed in its term if it is
		// still live under the lock and its end would not move back.
		b.WriteString("UPDATE election_leaders SET lease_expires_at = ?, updated_at = ? WHERE namespace = ? AND leader_id = ? AND term = ? " +
			"AND lease_expires_at > " + sqliteNow + " AND lease_expires_at < ?; ")
		args = append(args, expArg, nowArg, in.Namespace, in.ID, out.Seat.Term, expArg)
		newTerm, granted = out.Seat.Term, false
	default:
		b.WriteString("UPDATE election_leaders SET leader_id = ?, term = term + 1, lease_expires_at = ?, acquired_at = ?, updated_at = ? " +
			"WHERE namespace = ? AND term = ? AND (leader_id IS NULL OR lease_expires_at <= " + sqliteNow + "); ")
		args = append(args, in.ID, expArg, nowArg, nowArg, in.Namespace, out.Seat.Term)
		if held {
			// The lapsed term ends at its expiry, if this call granted the
			// next one.
			b.WriteString("UPDATE election_history SET ended_at = ?, end_reason = ? WHERE namespace = ? AND term = ? AND ended_at IS NULL " +
				"AND EXISTS (SELECT 1 FROM election_leaders WHERE namespace = ? AND leader_id = ? AND term = ? AND acquired_at = ?); ")
			args = append(args, d.TimeArg(exp.Time.Truncate(time.Microsecond)), in.Lapsed, in.Namespace, out.Seat.Term,
				in.Namespace, in.ID, newTerm, nowArg)
		}
		recordTerm(newTerm)
	}
	b.WriteString("COMMIT")
	n, err := execInTransaction(ctx, pool, b.String(), args, a.numbered)
	if err != nil {
		return Acquired{}, err
	}
	if n != 1 {
		// The seat changed since it was read: a row created meanwhile is
		// read again (the protocol's retry), anything else is left to the
		// caller's locked path.
		out.Undecided = out.Seat.Exists
		return out, nil
	}
	out.Held, out.Term, out.ExpiresAt, out.AcquiredAt, out.Granted = true, newTerm, until, at, granted
	if !granted {
		out.AcquiredAt = acq.Time
	}
	return out, nil
}

// execInTransaction runs q, statements from BEGIN to COMMIT, in one call on
// a connection of its own from pool (its placeholders numbered first when
// numbered), and returns the rows the last write changed. When the call fails, the transaction it may have left open is
// rolled back, or the connection discarded when that fails, before the
// connection goes back to the pool.
func execInTransaction(ctx context.Context, pool *sql.DB, q string, args []any, numbered bool) (int64, error) {
	if numbered {
		q = numberParams(q)
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	res, err := conn.ExecContext(ctx, q, args...)
	if err != nil {
		if _, rerr := conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil && !strings.Contains(rerr.Error(), "no transaction is active") {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		return 0, err
	}
	return res.RowsAffected()
}

func (d sqlite) vacater(callerTx bool) Vacater {
	if !d.multi || callerTx {
		return nil
	}
	return sqliteVacater{d}
}

type sqliteVacater struct{ d sqlite }

// sqliteVacate ends the held term, deletes the candidate's row when asked
// and clears the seat, the last write, in one transaction.
var sqliteVacate = [2]string{sqliteVacateSQL(false), sqliteVacateSQL(true)}

func sqliteVacateSQL(unregister bool) string {
	q := "BEGIN IMMEDIATE; " +
		"UPDATE election_history SET ended_at = " + sqliteNow + ", end_reason = ? WHERE namespace = ? AND leader_id = ? AND ended_at IS NULL " +
		"AND term = (SELECT term FROM election_leaders WHERE namespace = ? AND leader_id = ? AND ? IN (0, term)); "
	if unregister {
		q += "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ?; "
	}
	return q + "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + sqliteNow +
		" WHERE namespace = ? AND leader_id = ? AND ? IN (0, term); COMMIT"
}

func (v sqliteVacater) Vacate(ctx context.Context, _ gorm.ConnPool, pool *sql.DB, in VacateArgs) (bool, func(), error) {
	if pool == nil {
		return false, nil, errors.New("sqlite: no pool to vacate on")
	}
	args := []any{in.Reason, in.Namespace, in.ID, in.Namespace, in.ID, in.Term}
	q := sqliteVacate[0]
	if in.Unregister {
		q = sqliteVacate[1]
		args = append(args, in.Namespace, in.ID)
	}
	args = append(args, in.Namespace, in.ID, in.Term)
	n, err := execInTransaction(ctx, pool, q, args, v.d.numbered)
	if err != nil || n == 0 {
		return false, nil, err
	}
	return true, func() { v.d.notifyFile(in.Channel, in.Payload) }, nil
}
