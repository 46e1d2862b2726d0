package dialect

import (
	"context"
	"database/sql"
	"strconv"
)

// SetMySQLSlots sets the number of wake-up slots of MySQL listeners until
// restore is called.
func SetMySQLSlots(n int) (restore func()) {
	old := mySlotCount
	mySlotCount = n
	return func() { mySlotCount = old }
}

// MySQLWaiting returns the ids of the connections that wait as listeners of
// channel in db's current database (the probe's wait is not one of them).
func MySQLWaiting(ctx context.Context, db *sql.DB, channel string) ([]int64, error) {
	rows, err := db.QueryContext(ctx, "SELECT pl.ID FROM "+myPrefix+
		" JOIN information_schema.PROCESSLIST pl ON pl.INFO LIKE CONCAT('SELECT %, ''', x.p, '''%')", myName(channel))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// MySQLSlotName is the lock name of slot i of channel's listeners in db's
// current database.
func MySQLSlotName(ctx context.Context, db *sql.DB, channel string, i int) (string, error) {
	var p string
	err := db.QueryRowContext(ctx, "SELECT x.p FROM "+myPrefix, myName(channel)).Scan(&p)
	return p + strconv.Itoa(i), err
}

// TiDBWaitMatches reports whether the server's LIKE, with the pattern
// TiDB's Notify looks for a listener's tag with, matches the statement
// text q.
func TiDBWaitMatches(ctx context.Context, db *sql.DB, q, tag string) (bool, error) {
	var m bool
	err := db.QueryRowContext(ctx, "SELECT ? LIKE "+tidbWaitLike, q, tag).Scan(&m)
	return m, err
}

// MySQLWaitSQL is the statement a listener of prefix p in slot waits in
// (-1: no slot, as on TiDB).
func MySQLWaitSQL(p string, slot int) string { return myChainWaitSQL(p, slot) }
