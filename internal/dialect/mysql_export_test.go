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
