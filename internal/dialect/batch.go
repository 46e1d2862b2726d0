package dialect

import (
	"strconv"
	"strings"
	"time"
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
// it changed, use BatchRenewReturning. On MySQL, MariaDB and TiDB every
// lease it extends gets one new expiry, from one reading of the clock,
// which travels back as the statement's last insert id (microseconds since
// the epoch), as the single renewal's does; which leases it extended the
// caller learns from the rows affected (all of them, when that is n) or
// from a reading of the seats that begins after the renewal committed: a
// lease it shows held by the candidate in the term renewed, and live by the
// database clock, is one this statement extended, since a term that left a
// candidate never comes back to it and only the holder extends a lease.
func BatchRenew(d Dialect, n int) string {
	p := d.(pieces)
	set, from, where := "SET lease_expires_at = "+p.nowPlus()+", updated_at = "+p.now(), "election_leaders", ""
	if _, ok := d.(mysql); ok {
		from = "(SELECT SYSDATE(6) AS n LIMIT 1) t STRAIGHT_JOIN election_leaders"
		set = "SET lease_expires_at = TIMESTAMP('1970-01-01') + INTERVAL LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', t.n) + ?) MICROSECOND, " +
			"updated_at = t.n"
	}
	return finish(d, "UPDATE "+from+" "+set+where+batchRenewWhere(p, n))
}

// BatchRenewedAt is the expiry BatchRenew gave every lease it extended on
// MySQL, MariaDB and TiDB, from the statement's last insert id.
func BatchRenewedAt(lastInsertID int64) time.Time {
	return unixEpoch.Add(time.Duration(lastInsertID) * time.Microsecond)
}

func batchRenewWhere(p pieces, n int) string {
	var b strings.Builder
	b.WriteString(" WHERE leader_id = ? AND lease_expires_at > " + p.now() + " AND (")
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(namespace = ? AND term = ?)")
	}
	b.WriteString(")")
	return b.String()
}

func batchRenew(p pieces, n int) string {
	return "UPDATE election_leaders SET lease_expires_at = " + p.nowPlus() + ", updated_at = " + p.now() + batchRenewWhere(p, n)
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
// elsewhere the round that joins every namespace at once, six parameters
// each: 10,922 on MySQL and MariaDB and 5,461 on SQLite.
func BatchMaxNamespaces(d Dialect) int {
	switch d.(type) {
	case postgres:
		return pgMaxBinds - 1
	case sqlite:
		return sqliteMaxBinds / joinBinds
	}
	return mysqlMaxBinds / joinBinds
}

// joinBinds are the parameters joinRows takes per namespace.
const joinBinds = 6

// BatchExpired lists the candidate rows of n namespaces that expired before
// the database clock plus a duration, as Expired does for one namespace:
// parameters are the n namespaces, then the duration (negative: rows
// expired for longer than it). Rows: namespace, candidate_id. Each is then
// deleted by its primary key with Prune, so that a candidate that came back
// since is kept and no range is locked: on MySQL, MariaDB and TiDB, where
// BatchPrune does not apply.
func BatchExpired(d Dialect, n int) string {
	return finish(d, "SELECT c.namespace, c.candidate_id FROM election_candidates c"+withMember("c")+" WHERE c.namespace IN ("+marks(n)+
		") AND "+candidateTime("c", "expires_at")+" < "+d.(pieces).nowPlus())
}

// BatchPrune deletes, in one statement, the candidate rows of the
// namespaces nss that expired before the database clock plus window
// (negative: rows expired for longer than it), as BatchExpired lists them
// and Prune deletes them one by one, and returns it with its arguments. A
// row is judged again as it is deleted, by its own expiry and its member
// row's: a candidate row written again while the statement waited for its
// lock is kept, as Prune keeps it. (A member row refreshed after the
// statement began is not seen, as Prune, a statement of its own per row,
// did not see one refreshed after it began: the Group writes again the
// rows a prune deleted once its round finds its member row lapsed.) ok is
// false on MySQL, MariaDB and TiDB, which read with BatchExpired and
// delete by key with Prune, so that no range is locked.
//
// On PostgreSQL each namespace is read by itself through the primary key
// (LATERAL, as in BatchPruneHistory) from one array parameter, so that the
// statement's text is the same for any number of namespaces, and the rows
// found are deleted by their row ids; the bound is read once, before the
// rows. On SQLite, which writes one transaction at a time, the rows are
// deleted where they are found.
func BatchPrune(d Dialect, nss []string, window time.Duration) (q string, args []any, ok bool) {
	switch d.(type) {
	case postgres:
		const expired = " < (SELECT t FROM b)" // the bound, read once
		return finish(d, "WITH b AS MATERIALIZED (SELECT "+d.(pieces).nowPlus()+" AS t) "+
				"DELETE FROM election_candidates d WHERE d.ctid = ANY (ARRAY(SELECT x.ctid FROM unnest(CAST(? AS text[])) AS a(ns) "+
				"CROSS JOIN LATERAL (SELECT c.ctid FROM election_candidates c"+withMember("c")+
				" WHERE c.namespace = a.ns AND "+candidateTime("c", "expires_at")+expired+" OFFSET 0) x)) "+
				"AND GREATEST(d.expires_at, (SELECT m.expires_at FROM election_members m WHERE m.member_id = d.member_id))"+expired),
			[]any{d.DurationArg(window), TextArray(nss)}, true
	case sqlite:
		return finish(d, "DELETE FROM election_candidates WHERE MAX(expires_at, COALESCE((SELECT m.expires_at FROM election_members m "+
				"WHERE m.member_id = election_candidates.member_id), expires_at)) < "+d.(pieces).nowPlus()+" AND namespace IN ("+marks(len(nss))+")"),
			append([]any{d.DurationArg(window)}, anyStrings(nss)...), true
	}
	return "", nil, false
}

// MembersExpired lists the member rows that expired before the database
// clock plus a duration (negative: for longer than it): the duration. Rows:
// member_id. Each is then deleted by its key with PruneMember.
func MembersExpired(d Dialect) string {
	return finish(d, "SELECT member_id FROM election_members WHERE expires_at < "+d.(pieces).nowPlus())
}

// PruneMember deletes one member row if it is still expired as
// MembersExpired judged it: member id, the duration. On PostgreSQL the
// seats still marked as the member's lose the mark with it (MemberGone).
func PruneMember(d Dialect) string {
	if _, ok := d.(postgres); ok {
		when := " AND expires_at < clock_timestamp() + CAST($2 AS bigint) * interval '1 microsecond'"
		return finish(d, unmark("$1", when)+"DELETE FROM election_members WHERE member_id = $1"+when)
	}
	return finish(d, "DELETE FROM election_members WHERE member_id = ? AND expires_at < "+d.(pieces).nowPlus())
}

// BatchPruneHistory deletes the terms of the namespaces nss that ended
// before the database clock plus retention (negative: the retention), as
// PruneHistory does for one namespace, and returns the statement with its
// arguments.
//
// On PostgreSQL the terms are found namespace by namespace (LATERAL),
// through the index on (namespace, ended_at), and deleted by their row
// ids: with an IN list of a thousand namespaces the planner scanned the
// whole history instead, in every piece of every Group's prune (at 40,000
// namespaces x 16 processes most of the rows the database read). The
// namespaces travel as one array, so that the statement's text, prepared
// once per connection, is the same for any number of them.
func BatchPruneHistory(d Dialect, nss []string, retention time.Duration) (q string, args []any) {
	ended := "ended_at < " + d.(pieces).nowPlus()
	if _, ok := d.(postgres); ok {
		return finish(d, "DELETE FROM election_history WHERE ctid = ANY (ARRAY(SELECT x.ctid FROM unnest(CAST(? AS text[])) AS a(ns) "+
				"CROSS JOIN LATERAL (SELECT h.ctid FROM election_history h WHERE h.namespace = a.ns AND h."+ended+" OFFSET 0) x))"),
			[]any{TextArray(nss), d.DurationArg(retention)}
	}
	return finish(d, "DELETE FROM election_history WHERE namespace IN ("+marks(len(nss))+") AND "+ended),
		append(anyStrings(nss), d.DurationArg(retention))
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

// TextArray is vs as one PostgreSQL array literal, for a parameter the
// statement casts to text[]: every element quoted, its quotes and
// backslashes escaped, so any string arrives as it was.
func TextArray(vs []string) string {
	n := 2
	for _, v := range vs {
		n += len(v) + 3
	}
	var b strings.Builder
	b.Grow(n) // once: a round's arrays hold every namespace of a Group
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for {
			j := strings.IndexAny(v, `"\`)
			if j < 0 {
				break
			}
			b.WriteString(v[:j])
			b.WriteByte('\\')
			b.WriteByte(v[j])
			v = v[j+1:]
		}
		b.WriteString(v)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
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
