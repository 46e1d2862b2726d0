package dialect

import (
	"reflect"
	"strings"
)

// Statements are the SQL statements of the election protocol on one
// database, ready to run: their markers are in the driver's form. Each
// field documents its bound parameters in order. Durations are bound as
// Dialect.DurationArg makes them and timestamps as Dialect.TimeArg does.
type Statements struct {
	// Clock reads the database clock: one row, one column, UTC.
	Clock string
	// UpsertNow creates or refreshes a candidate row from one reading of
	// the clock, and sets its identity: namespace, candidate id, expiry
	// window (a duration), hostname, pid, label.
	UpsertNow string
	// UpsertAt creates or refreshes a candidate row with the times given,
	// and sets its identity: namespace, candidate id, registered at, last
	// heartbeat at, expires at, hostname, pid, label.
	UpsertAt string
	// InsertLeader creates a namespace's leader row in term 1, or does
	// nothing (zero rows affected) when it exists: namespace, leader id,
	// lease expires at, acquired at, updated at.
	InsertLeader string
	// KeepLease extends the lease a leader holds in a term: lease expires
	// at, updated at, namespace, leader id, term.
	KeepLease string
	// Grant gives the seat to a candidate in the next term, if the term is
	// still the one read: leader id, lease expires at, acquired at,
	// updated at, namespace, term read.
	Grant string
	// Vacate clears the seat if the candidate holds it, in whatever term:
	// namespace, leader id.
	Vacate string
	// VacateTerm clears the seat if the candidate holds it in the given
	// term: namespace, leader id, term.
	VacateTerm string
	// DeleteCandidate deletes a candidate row: namespace, candidate id.
	DeleteCandidate string
	// IsLeader counts (0 or 1) a live lease held by the candidate:
	// namespace, candidate id.
	IsLeader string
	// List returns the ids of the live candidates, ordered: namespace.
	List string
	// Expired returns the ids of the candidates whose rows expired before
	// the clock plus a (negative) duration: namespace, duration.
	Expired string
	// Prune deletes one candidate row if it is still expired as Expired
	// judged it, and its member row, when it points to one, is gone or
	// expired as long: namespace, candidate id, the duration, the duration
	// again.
	Prune string
	// LeaderIdentity reads the leader row and the identity on its leader's
	// candidate row, unlocked: namespace. It yields exactly one row: db_now,
	// leader_id, term, lease_expires_at, acquired_at, hostname, pid, label,
	// the last three NULL when there is no such candidate row.
	LeaderIdentity string
	// Candidates returns the live candidates, ordered by id: namespace. Each
	// row is candidate_id, hostname, pid, label, registered_at,
	// last_heartbeat_at, expires_at, and 1 when the candidate holds the
	// namespace's live lease, else 0.
	Candidates string
	// InsertTerm records a granted term in the history (replacing a row of
	// the same term, which only a reset leader row leaves behind):
	// namespace, term, leader id, hostname, pid, label, acquired at.
	InsertTerm string
	// EndTerm records that a term ended, if it is not recorded as ended:
	// ended at, reason, namespace, term.
	EndTerm string
	// EndHeld records that the term the leader row names ended now, if the
	// history names the candidate as its leader and it is not recorded as
	// ended: reason, namespace, leader id, namespace.
	EndHeld string
	// History returns a namespace's terms, newest first: namespace, limit.
	// Each row is term, leader_id, hostname, pid, label, acquired_at,
	// ended_at, end_reason.
	History string
	// Namespaces lists every namespace that has a leader row, a candidate
	// row or a term in the history, sorted; no parameters.
	Namespaces string
	// PruneHistory deletes the terms that ended before the clock plus a
	// (negative) duration: namespace, duration.
	PruneHistory string
	// GrantTerm is Grant and InsertTerm in one statement, where the
	// database can run them as one (PostgreSQL, with a data-modifying
	// WITH item); empty elsewhere. Parameters: Grant's, then the new
	// term's leader id, hostname, pid, label and acquired at. It reports
	// one row affected when the seat was granted, none when the leader row
	// had moved on (and then writes no history).
	GrantTerm string
	// RefreshGrantTerm is UpsertAt followed by GrantTerm, in one statement
	// where GrantTerm has one; empty elsewhere. Parameters: UpsertAt's,
	// then GrantTerm's.
	RefreshGrantTerm string
	// VacateNotify is a whole vacate in one statement, where the database
	// can run it as one (PostgreSQL); empty elsewhere: Vacate (or
	// VacateTerm), DeleteCandidate when asked, EndHeld for the term
	// vacated, and a notification of the vacancy, sent (at commit) only
	// when the seat was vacated. Parameters: namespace, leader id, term (0
	// for whatever term the leader holds), whether to delete the candidate
	// row, end reason, channel, payload. It yields one row: whether the
	// seat was vacated, and whether it moved instead (the candidate held
	// it in the statement's snapshot, but the row changed before the
	// statement could lock it: nothing was vacated).
	VacateNotify string
	// Acquire is the whole of Elect outside a caller's transaction in one
	// statement, where the database can run it as one (PostgreSQL: see
	// Acquirer), refreshing the candidate's row; empty elsewhere.
	// Parameters: namespace, candidate id, expiry window (a duration),
	// hostname, pid, label, the end reason of a lapsed term, whether to
	// lock the seat whatever the unlocked reading shows. It yields one
	// row: db_now; the seat before the statement wrote it, as locked when
	// it was locked, else as read without a lock (whether the row exists,
	// leader_id, term, lease_expires_at, acquired_at); then the term the
	// candidate holds after the statement, its lease's end and its grant
	// time (NULL when it holds nothing), and whether it was granted by the
	// statement.
	Acquire string
	// AcquireKept is Acquire without the candidate row's refresh, for a
	// Group's Election whose rounds keep the row.
	AcquireKept string
	// SelectLeader, indexed by Lock, reads the leader row with that lock:
	// namespace. It yields exactly one row: db_now, leader_id, term,
	// lease_expires_at, acquired_at. The leader columns are NULL when the
	// namespace has no row. db_now is read after the lock was granted. With
	// UpdateLock, a dialect without row locks may create the missing row,
	// vacant with term 0, to take its lock.
	SelectLeader [3]string
}

// pieces are what a database's file supplies for the statements: the parts
// that cannot be portable SQL.
type pieces interface {
	// rebind rewrites ? markers into the driver's placeholder form.
	rebind(query string) string
	// now is an expression for the database clock in UTC, read when the
	// expression is evaluated, not when the transaction began.
	now() string
	// nowPlus is now plus a duration given as the expression's one bound
	// parameter.
	nowPlus() string
	// plus is the timestamp expression expr plus a duration given as the
	// expression's one bound parameter.
	plus(expr string) string
	// upsertCandidate is the clause appended to
	// INSERT INTO election_candidates (...) VALUES (...) that refreshes
	// last_heartbeat_at and expires_at of an existing row.
	upsertCandidate() string
	// upsert is the clause appended to an INSERT that, when a row with the
	// same key columns exists, sets each of cols to the value the INSERT
	// gave it. It ends with the SET list, so more assignments can follow.
	upsert(keys, cols []string) string
	// insertIgnore is the clause appended to an INSERT into
	// election_leaders that makes a duplicate namespace a no-op.
	insertIgnore() string
	// selectLeader is the leader query of Statements.SelectLeader, with a
	// ? or $1 marker as the driver wants it.
	selectLeader(lock Lock) string
	// freeBetween is the condition that the seat row aliased l is or
	// became free strictly between the timestamp expressions lo and hi:
	// COALESCE(lease_expires_at, updated_at), through an index. It may
	// use each more than once: freeArgs gives the arguments of their
	// markers, in order.
	freeBetween(lo, hi string) string
	freeArgs(lo, hi any) []any
}

// A candidate's liveness, in one place for every statement that reads
// candidates. A candidate row is live while its own expiry is later than
// the database clock, or, when it points to a member row (schema version
// 3: a Group keeps its candidacies alive with one row per process), while
// that row's is. withMember joins the member row of the candidate row
// aliased c (as c followed by m); candidateTime is then the row's
// effective last_heartbeat_at or expires_at, the later of its own and its
// member's; liveCandidate is the condition that c is live at now.
func withMember(c string) string {
	return " LEFT JOIN election_members " + c + "m ON " + c + "m.member_id = " + c + ".member_id"
}

func candidateTime(c, col string) string {
	return "CASE WHEN " + c + "m." + col + " > " + c + "." + col + " THEN " + c + "m." + col + " ELSE " + c + "." + col + " END"
}

func liveCandidate(c, now string) string { return candidateTime(c, "expires_at") + " > " + now }

// insertCandidate begins the statements that write a candidate row with
// its identity.
const insertCandidate = "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at, hostname, pid, label) "

// candidateKey and candidateRefresh are the key of a candidate row and the
// columns a registration refreshes.
var (
	candidateKey     = []string{"namespace", "candidate_id"}
	candidateRefresh = []string{"last_heartbeat_at", "expires_at", "hostname", "pid", "label"}
)

// grantSeat, insertTerm and termUpsert are the pieces Grant and InsertTerm
// are written from, and, on PostgreSQL, GrantTerm too.
const (
	grantSeat  = "UPDATE election_leaders SET leader_id = ?, term = term + 1, lease_expires_at = ?, acquired_at = ?, updated_at = ? WHERE namespace = ? AND term = ?"
	insertTerm = "INSERT INTO election_history (namespace, term, leader_id, hostname, pid, label, acquired_at) "
)

// termUpsert ends InsertTerm: a term's row written again (its grant rolled
// back and made anew) is reopened.
func termUpsert(p pieces) string {
	return p.upsert([]string{"namespace", "term"}, []string{"leader_id", "hostname", "pid", "label", "acquired_at"}) +
		", ended_at = NULL, end_reason = NULL"
}

// upsertAt is UpsertAt before its markers are rebound.
func upsertAt(p pieces) string {
	return insertCandidate + "VALUES (?, ?, ?, ?, ?, ?, ?, ?) " + p.upsert(candidateKey, candidateRefresh)
}

// build writes the statements of the protocol, portable SQL with the
// database's pieces, once per dialect.
func build(p pieces) *Statements {
	now, nowPlus := p.now(), p.nowPlus()
	s := &Statements{
		Clock: "SELECT " + now,
		// One reading of the clock for all three times (LIMIT 1: TiDB
		// evaluates a derived table without it once per use).
		UpsertNow: insertCandidate +
			"SELECT ?, ?, t.n, t.n, " + p.plus("t.n") + ", ?, ?, ? FROM (SELECT " + now + " AS n LIMIT 1) t WHERE 1 = 1 " + p.upsert(candidateKey, candidateRefresh),
		UpsertAt:        upsertAt(p),
		InsertLeader:    "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 1, ?, ?, ?) " + p.insertIgnore(),
		KeepLease:       "UPDATE election_leaders SET lease_expires_at = ?, updated_at = ? WHERE namespace = ? AND leader_id = ? AND term = ?",
		Grant:           grantSeat,
		Vacate:          "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ?",
		VacateTerm:      "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ? AND term = ?",
		DeleteCandidate: "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ?",
		IsLeader:        "SELECT COUNT(*) FROM election_leaders WHERE namespace = ? AND leader_id = ? AND lease_expires_at > " + now,
		List: "SELECT c.candidate_id FROM election_candidates c" + withMember("c") + " WHERE c.namespace = ? AND " + liveCandidate("c", now) +
			" ORDER BY c.candidate_id",
		Expired: "SELECT c.candidate_id FROM election_candidates c" + withMember("c") + " WHERE c.namespace = ? AND " +
			candidateTime("c", "expires_at") + " < " + nowPlus,
		// A member's row is judged by the member row, which must be gone
		// or expired as long: a Group that came back keeps its rows.
		Prune: "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ? AND expires_at < " + nowPlus +
			" AND NOT EXISTS (SELECT 1 FROM election_members m WHERE m.member_id = election_candidates.member_id AND m.expires_at >= " + nowPlus + ")",

		LeaderIdentity: "SELECT " + now + ", l.leader_id, l.term, l.lease_expires_at, l.acquired_at, c.hostname, c.pid, c.label " +
			"FROM (SELECT 1) d LEFT JOIN election_leaders l ON l.namespace = ? " +
			"LEFT JOIN election_candidates c ON c.namespace = l.namespace AND c.candidate_id = l.leader_id",
		Candidates: "SELECT c.candidate_id, c.hostname, c.pid, c.label, c.registered_at, " + candidateTime("c", "last_heartbeat_at") + ", " +
			candidateTime("c", "expires_at") + ", CASE WHEN l.namespace IS NULL THEN 0 ELSE 1 END " +
			"FROM (SELECT " + now + " AS n LIMIT 1) t JOIN election_candidates c ON c.namespace = ?" + withMember("c") + " " +
			"LEFT JOIN election_leaders l ON l.namespace = c.namespace AND l.leader_id = c.candidate_id AND l.lease_expires_at > t.n " +
			"WHERE " + liveCandidate("c", "t.n") + " ORDER BY c.candidate_id",
		InsertTerm: insertTerm + "VALUES (?, ?, ?, ?, ?, ?, ?) " + termUpsert(p),
		EndTerm:    "UPDATE election_history SET ended_at = ?, end_reason = ? WHERE namespace = ? AND term = ? AND ended_at IS NULL",
		EndHeld: "UPDATE election_history SET ended_at = " + now + ", end_reason = ? " +
			"WHERE namespace = ? AND leader_id = ? AND ended_at IS NULL AND term = (SELECT term FROM election_leaders WHERE namespace = ?)",
		History:      "SELECT term, leader_id, hostname, pid, label, acquired_at, ended_at, end_reason FROM election_history WHERE namespace = ? ORDER BY term DESC LIMIT ?",
		PruneHistory: "DELETE FROM election_history WHERE namespace = ? AND ended_at < " + nowPlus,
		Namespaces: "SELECT namespace FROM election_leaders UNION SELECT namespace FROM election_candidates " +
			"UNION SELECT namespace FROM election_history ORDER BY 1",
	}
	for _, q := range []*string{&s.UpsertNow, &s.UpsertAt, &s.InsertLeader, &s.KeepLease, &s.Grant, &s.Vacate, &s.VacateTerm,
		&s.DeleteCandidate, &s.IsLeader, &s.List, &s.Expired, &s.Prune,
		&s.LeaderIdentity, &s.Candidates, &s.InsertTerm, &s.EndTerm, &s.EndHeld, &s.History, &s.PruneHistory, &s.Namespaces} {
		*q = p.rebind(*q)
	}
	for _, l := range []Lock{NoLock, ShareLock, UpdateLock} {
		s.SelectLeader[l] = p.selectLeader(l)
	}
	return s
}

// onConflictUpdate is the upsert clause of PostgreSQL and SQLite.
func onConflictUpdate(keys, cols []string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = excluded." + c
	}
	return "ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ")
}

// VersionsTable records which schema versions package migrate applied.
const VersionsTable = "election_schema_migrations"

// MigrationStatements are package migrate's bookkeeping statements on one
// database, ready to run (markers in the driver's form, tables in the
// dialect's schema when it has one). The schema changes themselves are the
// shipped SQL files.
type MigrationStatements struct {
	// CreateVersions creates VersionsTable if it does not exist; no
	// parameters.
	CreateVersions string
	// Versions lists the versions recorded as applied; no parameters.
	Versions string
	// Recorded counts the rows of one version (0 or 1): version.
	Recorded string
	// Record records a version as applied: version, name.
	Record string
	// DropVersions drops VersionsTable if it exists; no parameters.
	DropVersions string
}

// Migrations returns package migrate's bookkeeping statements on d.
func Migrations(d Dialect) *MigrationStatements {
	s := &MigrationStatements{
		CreateVersions: "CREATE TABLE IF NOT EXISTS " + VersionsTable + " (version BIGINT NOT NULL PRIMARY KEY, name VARCHAR(191) NOT NULL)",
		Versions:       "SELECT version FROM " + VersionsTable,
		Recorded:       d.Rebind("SELECT COUNT(*) FROM " + VersionsTable + " WHERE version = ?"),
		Record:         d.Rebind("INSERT INTO " + VersionsTable + " (version, name) VALUES (?, ?)"),
		DropVersions:   "DROP TABLE IF EXISTS " + VersionsTable,
	}
	if schema := Schema(d); schema != "" {
		qualifyAll(reflect.ValueOf(s).Elem(), QuoteSchema(schema))
	}
	return s
}

// Session settings of the migration connection on a Galera node: reads wait
// until the node has applied every commit of the cluster, and back.
const (
	galeraSyncReads    = "SET SESSION wsrep_sync_wait = 1"
	galeraDefaultReads = "SET SESSION wsrep_sync_wait = DEFAULT"
)

// PostgreSQL statements that put a migration's tables in a schema, given
// the quoted name.
const (
	pgCreateSchema = "CREATE SCHEMA IF NOT EXISTS "
	pgLocalPath    = "SET LOCAL search_path TO "
)
