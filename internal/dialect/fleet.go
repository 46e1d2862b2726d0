package dialect

import "sync"

// Fleet statements are the operator's reads of every namespace at once:
// each is one statement whatever the number of namespaces, so a dashboard
// refresh or a `sqlelect status` of a thousand namespaces costs the
// database a constant number of statements. They only read and take no
// lock.

// liveLease is the condition under which the leader row aliased l holds a
// live lease at the time now.
func liveLease(l, now string) string {
	return l + ".lease_expires_at > " + now
}

// FleetStatements are the fleet reads on one database, ready to run
// (markers in the driver's form, tables in the dialect's schema).
type FleetStatements struct {
	// Seats reads the seat of every namespace that has a leader row or a
	// candidate row, one row each; no parameters. Columns: db_now,
	// namespace; the leader row's leader_id, term, lease_expires_at,
	// acquired_at (NULL when the namespace has no leader row); the
	// candidate row of the leader the seat names: hostname, pid, label,
	// last_heartbeat_at, expires_at (NULL when the seat is vacant or the
	// row is gone); the history row of the leader row's term: leader_id,
	// hostname, pid, label, acquired_at, ended_at, end_reason (NULL when
	// there is none); and the number of live candidates (judged at a
	// reading of the clock of its own in the same statement).
	Seats string
	// Candidates reads every live candidate of every namespace; no
	// parameters. Columns: db_now, namespace, candidate_id, hostname, pid,
	// label, registered_at, last_heartbeat_at, expires_at, and 1 when the
	// candidate holds its namespace's live lease, else 0.
	Candidates string
	// Processes reads the live candidates grouped by identity (hostname,
	// pid, label); no parameters. Columns: db_now, hostname, pid, label,
	// the number of namespaces it is a live candidate in, the number of
	// distinct candidate ids, the number of live leases they hold, the
	// latest last_heartbeat_at.
	Processes string
	// Terms reads, for every namespace with a leader row, its newest
	// terms that were running at some time within a window ending now:
	// not recorded as ended, or ended after now plus a (negative)
	// duration. Parameters: how many terms back from the leader row's
	// term to look at most, then the duration. Columns: db_now,
	// namespace, term, leader_id, hostname, pid, label, acquired_at,
	// ended_at, end_reason; ordered by namespace and term. The terms are
	// found through the history's primary key, never by a scan of every
	// ended term.
	Terms string
}

var fleets sync.Map // Dialect -> *FleetStatements

// Fleet returns the fleet reads on d, built once per dialect and schema.
func Fleet(d Dialect) *FleetStatements {
	if v, ok := fleets.Load(d); ok {
		return v.(*FleetStatements)
	}
	v, _ := fleets.LoadOrStore(d, buildFleet(d))
	return v.(*FleetStatements)
}

func buildFleet(d Dialect) *FleetStatements {
	p := d.(pieces)
	clock := "(SELECT " + p.now() + " AS n LIMIT 1) t"
	return &FleetStatements{
		// The namespaces and their live candidates come from one scan of
		// each table, grouped (a count per namespace in a subquery would
		// visit a namespace's rows through the index, page by page, and
		// PostgreSQL's estimate of that reaches the cost at which it
		// compiles the query first, for longer than it runs). The derived
		// table reads the clock for the count; db_now is its own reading,
		// microseconds apart.
		Seats: finish(d, "SELECT t.n, s.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at, "+
			"c.hostname, c.pid, c.label, "+candidateTime("c", "last_heartbeat_at")+", "+candidateTime("c", "expires_at")+", "+
			"h.leader_id, h.hostname, h.pid, h.label, h.acquired_at, h.ended_at, h.end_reason, s.live "+
			"FROM "+clock+" CROSS JOIN (SELECT x.namespace, SUM(x.live) AS live FROM ("+
			"SELECT namespace, 0 AS live FROM election_leaders UNION ALL "+
			"SELECT e.namespace, CASE WHEN "+liveCandidate("e", "u.n")+" THEN 1 ELSE 0 END FROM (SELECT "+p.now()+" AS n LIMIT 1) u "+
			"CROSS JOIN election_candidates e"+withMember("e")+") x GROUP BY x.namespace) s "+
			"LEFT JOIN election_leaders l ON l.namespace = s.namespace "+
			"LEFT JOIN election_candidates c ON c.namespace = l.namespace AND c.candidate_id = l.leader_id"+withMember("c")+" "+
			"LEFT JOIN election_history h ON h.namespace = l.namespace AND h.term = l.term"),
		Candidates: finish(d, "SELECT t.n, c.namespace, c.candidate_id, c.hostname, c.pid, c.label, c.registered_at, "+
			candidateTime("c", "last_heartbeat_at")+", "+candidateTime("c", "expires_at")+", CASE WHEN l.namespace IS NULL THEN 0 ELSE 1 END "+
			"FROM "+clock+" CROSS JOIN election_candidates c"+withMember("c")+" "+
			"LEFT JOIN election_leaders l ON l.namespace = c.namespace AND l.leader_id = c.candidate_id AND "+liveLease("l", "t.n")+" "+
			"WHERE "+liveCandidate("c", "t.n")+" ORDER BY c.namespace, c.candidate_id"),
		// Grouped by candidate first, then by identity: two hash
		// aggregates, where COUNT(DISTINCT) would sort every row.
		Processes: finish(d, "SELECT MAX(p.n), p.hostname, p.pid, p.label, SUM(p.k), COUNT(*), SUM(p.leads), MAX(p.hb) FROM ("+
			"SELECT t.n, c.hostname, c.pid, c.label, c.candidate_id, COUNT(*) AS k, "+
			"SUM(CASE WHEN l.namespace IS NULL THEN 0 ELSE 1 END) AS leads, MAX("+candidateTime("c", "last_heartbeat_at")+") AS hb "+
			"FROM "+clock+" CROSS JOIN election_candidates c"+withMember("c")+" "+
			"LEFT JOIN election_leaders l ON l.namespace = c.namespace AND l.leader_id = c.candidate_id AND "+liveLease("l", "t.n")+" "+
			"WHERE "+liveCandidate("c", "t.n")+" GROUP BY t.n, c.hostname, c.pid, c.label, c.candidate_id) p "+
			"GROUP BY p.hostname, p.pid, p.label"),
		Terms: finish(d, "SELECT t.n, h.namespace, h.term, h.leader_id, h.hostname, h.pid, h.label, h.acquired_at, h.ended_at, h.end_reason "+
			"FROM "+clock+" CROSS JOIN election_leaders l "+
			"JOIN election_history h ON h.namespace = l.namespace AND h.term > l.term - ? AND h.term <= l.term "+
			"WHERE h.ended_at IS NULL OR h.ended_at > "+p.plus("t.n")+" "+
			"ORDER BY h.namespace, h.term"),
	}
}
