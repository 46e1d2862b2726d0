package dialect

// Statements are the SQL statements of the election protocol on one
// database, ready to run: their markers are in the driver's form. Each
// field documents its bound parameters in order. Durations are bound as
// Dialect.DurationArg makes them and timestamps as Dialect.TimeArg does.
type Statements struct {
	// Clock reads the database clock: one row, one column, UTC.
	Clock string
	// UpsertNow creates or refreshes a candidate row from one reading of
	// the clock: namespace, candidate id, expiry window (a duration).
	UpsertNow string
	// UpsertAt creates or refreshes a candidate row with the times given:
	// namespace, candidate id, registered at, last heartbeat at, expires at.
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
	// judged it: namespace, candidate id, duration.
	Prune string
	// SelectLeader, indexed by Lock, reads the leader row with that lock:
	// namespace. It yields exactly one row: db_now, leader_id, term,
	// lease_expires_at, acquired_at. The leader columns are NULL when the
	// namespace has no row. db_now is read after the lock was granted. With
	// UpdateLock, a dialect without row locks may create the missing row,
	// vacant with term 0, to take its lock.
	SelectLeader [3]string
}

// All lists the statements the protocol runs (every one but Clock), for
// preparing them ahead.
func (s *Statements) All() []string {
	return append([]string{s.UpsertNow, s.UpsertAt, s.InsertLeader, s.KeepLease, s.Grant, s.Vacate, s.VacateTerm,
		s.DeleteCandidate, s.IsLeader, s.List, s.Expired, s.Prune}, s.SelectLeader[:]...)
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
	// insertIgnore is the clause appended to an INSERT into
	// election_leaders that makes a duplicate namespace a no-op.
	insertIgnore() string
	// selectLeader is the leader query of Statements.SelectLeader, with a
	// ? or $1 marker as the driver wants it.
	selectLeader(lock Lock) string
}

// insertCandidate begins every statement that writes a candidate row.
const insertCandidate = "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) "

// build writes the statements of the protocol, portable SQL with the
// database's pieces, once per dialect.
func build(p pieces) *Statements {
	now, nowPlus := p.now(), p.nowPlus()
	s := &Statements{
		Clock: "SELECT " + now,
		// One reading of the clock for all three times.
		UpsertNow: insertCandidate +
			"SELECT ?, ?, t.n, t.n, " + p.plus("t.n") + " FROM (SELECT " + now + " AS n) t WHERE 1 = 1 " + p.upsertCandidate(),
		UpsertAt:        insertCandidate + "VALUES (?, ?, ?, ?, ?) " + p.upsertCandidate(),
		InsertLeader:    "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 1, ?, ?, ?) " + p.insertIgnore(),
		KeepLease:       "UPDATE election_leaders SET lease_expires_at = ?, updated_at = ? WHERE namespace = ? AND leader_id = ? AND term = ?",
		Grant:           "UPDATE election_leaders SET leader_id = ?, term = term + 1, lease_expires_at = ?, acquired_at = ?, updated_at = ? WHERE namespace = ? AND term = ?",
		Vacate:          "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ?",
		VacateTerm:      "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ? AND term = ?",
		DeleteCandidate: "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ?",
		IsLeader:        "SELECT COUNT(*) FROM election_leaders WHERE namespace = ? AND leader_id = ? AND lease_expires_at > " + now,
		List:            "SELECT candidate_id FROM election_candidates WHERE namespace = ? AND expires_at > " + now + " ORDER BY candidate_id",
		Expired:         "SELECT candidate_id FROM election_candidates WHERE namespace = ? AND expires_at < " + nowPlus,
		Prune:           "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ? AND expires_at < " + nowPlus,
	}
	for _, q := range []*string{&s.UpsertNow, &s.UpsertAt, &s.InsertLeader, &s.KeepLease, &s.Grant, &s.Vacate, &s.VacateTerm,
		&s.DeleteCandidate, &s.IsLeader, &s.List, &s.Expired, &s.Prune} {
		*q = p.rebind(*q)
	}
	for _, l := range []Lock{NoLock, ShareLock, UpdateLock} {
		s.SelectLeader[l] = p.selectLeader(l)
	}
	return s
}
