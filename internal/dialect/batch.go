package dialect

import (
	"strconv"
	"strings"
)

// Batch statements serve one candidate in many namespaces with one
// statement each, whatever the number of namespaces: the statement text
// grows with the count, the number of round trips does not. Each takes
// the count n (at least 1) and returns the statement with the dialect's
// markers, its tables qualified like the dialect's Statements.

// BatchRenew extends, in one statement, every lease a candidate holds in
// the terms given: parameters are the expiry window (a duration), the
// candidate id, then n pairs of namespace and term. A lease that expired by
// the database clock, or whose term moved on, is left alone, as in the
// single renewal. It returns no rows: where the database can say which rows
// it changed, use BatchRenewReturning; elsewhere (MySQL, MariaDB, TiDB)
// the caller learns which leases were extended from a reading of the seats
// that begins after the renewal committed (BatchSeats): a lease it shows
// held by the candidate in the term renewed, and live by the database
// clock, is one this statement extended, since a term that left a
// candidate never comes back to it and only the holder extends a lease.
func BatchRenew(d Dialect, n int) string {
	return finish(d, batchRenew(d.(pieces), n))
}

func batchRenew(p pieces, n int) string {
	var b strings.Builder
	b.WriteString("UPDATE election_leaders SET lease_expires_at = " + p.nowPlus() + ", updated_at = " + p.now() +
		" WHERE leader_id = ? AND lease_expires_at > " + p.now() + " AND (")
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(namespace = ? AND term = ?)")
	}
	b.WriteString(")")
	return b.String()
}

// BatchRenewReturning is BatchRenew returning one row per lease it
// extended, and none for a lease it left alone: namespace,
// lease_expires_at (the new expiry). ok is false on the databases without
// UPDATE ... RETURNING (MySQL, MariaDB, TiDB), which run BatchRenew
// instead. A lease is renewed only when this statement says so: a seat
// vacated by another transaction while the statement waited for its row
// is skipped and returns nothing.
func BatchRenewReturning(d Dialect, n int) (q string, ok bool) {
	switch d.(type) {
	case postgres, sqlite:
		return finish(d, batchRenew(d.(pieces), n)+" RETURNING namespace, lease_expires_at"), true
	}
	return "", false
}

// BatchSeats reads the seats of n namespaces with one reading of the
// database clock: parameters are the namespaces. It yields one row per
// namespace that has a leader row, and a single row of NULLs (but the
// clock) when none has: db_now, namespace, leader_id, term,
// lease_expires_at, acquired_at. It takes no lock.
func BatchSeats(d Dialect, n int) string {
	p := d.(pieces)
	return finish(d, "SELECT t.n, l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT "+
		p.now()+" AS n LIMIT 1) t LEFT JOIN election_leaders l ON l.namespace IN ("+marks(n)+")")
}

// BatchSeatsLive is BatchSeats with, on every row, the number of distinct
// candidates live in any of the n namespaces, counting the caller once
// whether or not its rows are live yet: the count Balance needs, read in
// the same statement. Parameters: the n namespaces, the caller's candidate
// id, then the n namespaces again. Rows are BatchSeats' columns, then the
// count.
func BatchSeatsLive(d Dialect, n int) string {
	p := d.(pieces)
	return finish(d, "SELECT t.n, l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at, t.k FROM (SELECT "+
		p.now()+" AS n, (SELECT COUNT(DISTINCT c.candidate_id) FROM election_candidates c WHERE c.namespace IN ("+marks(n)+
		") AND c.expires_at > "+p.now()+" AND c.candidate_id <> ?) + 1 AS k LIMIT 1) t LEFT JOIN election_leaders l ON l.namespace IN ("+
		marks(n)+")")
}

// Bound parameters a statement may carry: PostgreSQL's wire protocol
// counts them in 16 bits, and so does MySQL's for prepared statements;
// SQLite's default SQLITE_MAX_VARIABLE_NUMBER (since 3.32) is 32766.
const (
	pgMaxBinds     = 65535
	mysqlMaxBinds  = 65535
	sqliteMaxBinds = 32766
)

// BatchMaxNamespaces is the most namespaces one candidate can serve with
// the batch statements on d, bounded by the parameters a statement may
// carry: on PostgreSQL, whose round passes its namespaces as arrays,
// BatchUnregister's candidate id and one parameter per namespace, 65,534;
// elsewhere BatchHeartbeat's 8 per namespace, 8,191 on MySQL and MariaDB
// and 4,095 on SQLite.
func BatchMaxNamespaces(d Dialect) int {
	switch d.(type) {
	case postgres:
		return pgMaxBinds - 1
	case sqlite:
		return sqliteMaxBinds / 8
	}
	return mysqlMaxBinds / 8
}

// BatchHeartbeat creates or refreshes n candidate rows, as UpsertAt does
// one: parameters are, per row, namespace, candidate id, registered at,
// last heartbeat at, expires at, hostname, pid, label.
func BatchHeartbeat(d Dialect, n int) string {
	p := d.(pieces)
	row := "(?, ?, ?, ?, ?, ?, ?, ?)"
	rows := strings.Repeat(row+", ", n-1) + row
	return finish(d, insertCandidate+"VALUES "+rows+" "+p.upsert(candidateKey, candidateRefresh))
}

// BatchLive counts the distinct candidates live in any of n namespaces:
// parameters are the namespaces.
func BatchLive(d Dialect, n int) string {
	p := d.(pieces)
	return finish(d, "SELECT COUNT(DISTINCT candidate_id) FROM election_candidates WHERE namespace IN ("+marks(n)+") AND expires_at > "+p.now())
}

// BatchExpired lists the candidate rows of n namespaces that expired before
// the database clock plus a duration, as Expired does for one namespace:
// parameters are the n namespaces, then the duration (negative: rows
// expired for longer than it). Rows: namespace, candidate_id. Each is then
// deleted by its primary key with Prune, so that a candidate that came back
// since is kept and no range is locked.
func BatchExpired(d Dialect, n int) string {
	return finish(d, "SELECT namespace, candidate_id FROM election_candidates WHERE namespace IN ("+marks(n)+
		") AND expires_at < "+d.(pieces).nowPlus())
}

// BatchPruneHistory deletes the terms of n namespaces that ended before the
// database clock plus a duration, as PruneHistory does for one namespace:
// parameters are the n namespaces, then the duration (negative: the
// retention).
func BatchPruneHistory(d Dialect, n int) string {
	return finish(d, "DELETE FROM election_history WHERE namespace IN ("+marks(n)+
		") AND ended_at < "+d.(pieces).nowPlus())
}

// BatchUnregister deletes a candidate's rows in n namespaces: parameters
// are the candidate id, then the namespaces.
func BatchUnregister(d Dialect, n int) string {
	return finish(d, "DELETE FROM election_candidates WHERE candidate_id = ? AND namespace IN ("+marks(n)+")")
}

// marks is n ? markers separated by commas.
func marks(n int) string {
	return strings.Repeat("?, ", n-1) + "?"
}

// finish rebinds q's markers for d's driver and qualifies its tables with
// d's schema, if it has one.
func finish(d Dialect, q string) string {
	q = d.(pieces).rebind(q)
	if s := Schema(d); s != "" {
		q = qualify(q, QuoteSchema(s))
	}
	return q
}

// roundTag begins every statement BatchRound builds: a comment that names
// the number of namespaces in the round, since the namespaces themselves
// travel in one array parameter.
const roundTag = "/* sqlelect round: "

// BatchRoundNamespaces reports whether q is a statement of BatchRound and
// for how many namespaces, for tools that count a group's rounds by the
// statements that reach the driver.
func BatchRoundNamespaces(q string) (n int, ok bool) {
	rest, found := strings.CutPrefix(q, roundTag)
	if !found {
		return 0, false
	}
	count, _, found := strings.Cut(rest, " namespaces */ ")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// BatchRound is a group's whole round in one statement where the database
// can run it as one: PostgreSQL, whose data-modifying WITH queries share the
// statement's snapshot. ok is false on the other databases, which run
// BatchRenew, BatchSeats, BatchHeartbeat and BatchLive instead.
//
// From one reading of the database clock the statement extends the leases
// of the held terms as BatchRenew does, creates or refreshes the
// candidate's rows in the n namespaces as BatchHeartbeat does, and reads
// the n seats as BatchSeats does. Its text depends on n only through a
// leading comment: the namespaces and terms travel as arrays, so the
// server plans a statement of the same size whatever their number. The
// arrays are joined through unnest, never compared with = ANY, whose
// planning estimates every element against the column's statistics.
// Parameters: the expiry window (a duration), the candidate id, hostname,
// pid and label; then the n namespaces as one TextArray; then, with held,
// the namespaces of the held leases as a TextArray and their terms, in the
// same order, as an Int64Array. Rows are those of BatchSeats, then
// renewed_expires_at: the new expiry of a lease this statement extended,
// NULL for every other seat; with live, each row ends with the number of
// distinct candidates live in the n namespaces, this one included.
//
// The seats are read from the statement's snapshot, taken before the
// renewal touched any row: a seat vacated by a transaction that committed
// after the snapshot, while the renewal waited for its row lock, still
// reads as held, and the renewal, which checks the row again once the lock
// is granted, skips it. Only renewed_expires_at says whether a lease was
// renewed.
func BatchRound(d Dialect, n int, held, live bool) (q string, ok bool) {
	if _, ok := d.(postgres); !ok {
		return "", false
	}
	const names = "CAST($6 AS text[])"
	until := "c.n + CAST($1 AS bigint) * interval '1 microsecond'"

	var b strings.Builder
	b.WriteString(roundTag + strconv.Itoa(n) + " namespaces */ WITH c AS (SELECT clock_timestamp() AS n)")
	if held {
		b.WriteString(", r AS (UPDATE election_leaders AS u SET lease_expires_at = " + until + ", updated_at = c.n" +
			" FROM c, unnest(CAST($7 AS text[]), CAST($8 AS bigint[])) AS t(ns, term)" +
			" WHERE u.namespace = t.ns AND u.term = t.term AND u.leader_id = $2 AND u.lease_expires_at > c.n" +
			" RETURNING u.namespace, u.lease_expires_at)")
	}
	b.WriteString(", h AS (" + insertCandidate + "SELECT v.ns, $2, c.n, c.n, " + until +
		", CAST($3 AS text), CAST($4 AS bigint), CAST($5 AS text) FROM c, unnest(" + names + ") AS v(ns) " +
		onConflictUpdate(candidateKey, candidateRefresh) + ")")
	if live {
		// Counted once, in a WITH item of its own: as a subquery of the
		// SELECT list it would be correlated with c and counted again for
		// every seat.
		b.WriteString(", k AS (SELECT COUNT(DISTINCT e.candidate_id) + 1 AS n FROM c, unnest(" + names + ") AS a(ns)" +
			" JOIN election_candidates e ON e.namespace = a.ns WHERE e.expires_at > c.n AND e.candidate_id <> $2)")
	}
	b.WriteString(" SELECT c.n, s.namespace, s.leader_id, s.term, s.lease_expires_at, s.acquired_at, ")
	if held {
		b.WriteString("r.lease_expires_at")
	} else {
		b.WriteString("CAST(NULL AS timestamptz)")
	}
	if live {
		b.WriteString(", k.n")
	}
	b.WriteString(" FROM c")
	if live {
		b.WriteString(" CROSS JOIN k")
	}
	b.WriteString(" LEFT JOIN (SELECT l.* FROM unnest(" + names + ") AS a(ns) JOIN election_leaders l ON l.namespace = a.ns) s ON true")
	if held {
		b.WriteString(" LEFT JOIN r ON r.namespace = s.namespace")
	}
	return finish(d, b.String()), true
}

// TextArray is vs as one PostgreSQL array literal, for a parameter the
// statement casts to text[]: every element quoted, its quotes and
// backslashes escaped, so any string arrives as it was.
func TextArray(vs []string) string {
	return arrayLiteral(vs, func(b *strings.Builder, v string) {
		b.WriteByte('"')
		for i := 0; i < len(v); i++ {
			if v[i] == '"' || v[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		b.WriteByte('"')
	})
}

// Int64Array is vs as one PostgreSQL array literal, for a parameter the
// statement casts to bigint[].
func Int64Array(vs []int64) string {
	return arrayLiteral(vs, func(b *strings.Builder, v int64) { b.WriteString(strconv.FormatInt(v, 10)) })
}

// arrayLiteral writes vs between braces, separated by commas, each element
// with write.
func arrayLiteral[T any](vs []T, write func(*strings.Builder, T)) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		write(&b, v)
	}
	b.WriteByte('}')
	return b.String()
}
