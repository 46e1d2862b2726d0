package election

import "github.com/sqlelect/sqlelect/internal/dialect"

// queries are the statements of the protocol, built once per dialect.
type queries struct {
	upsertNow, upsertAt, insertLeader, keepLease, grant string
	vacate, vacateTerm, deleteCandidate                 string
	isLeader, list, expired, prune                      string
	selectLeader                                        map[dialect.Lock]string
}

// all lists every statement, for preparing them ahead.
func (q queries) all() []string {
	out := []string{q.upsertNow, q.upsertAt, q.insertLeader, q.keepLease, q.grant, q.vacate, q.vacateTerm,
		q.deleteCandidate, q.isLeader, q.list, q.expired, q.prune}
	for _, s := range q.selectLeader {
		out = append(out, s)
	}
	return out
}

func buildQueries(d dialect.Dialect) queries {
	now, plus := d.Now(), d.NowPlus()
	insertCandidate := "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) VALUES "
	q := queries{
		// One reading of the clock for all three times.
		upsertNow: "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) " +
			"SELECT ?, ?, t.n, t.n, " + d.Plus("t.n") + " FROM (SELECT " + now + " AS n) t WHERE 1 = 1 " + d.UpsertCandidate(),
		upsertAt:        insertCandidate + "(?, ?, ?, ?, ?) " + d.UpsertCandidate(),
		insertLeader:    "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 1, ?, ?, ?) " + d.InsertIgnore(),
		keepLease:       "UPDATE election_leaders SET lease_expires_at = ?, updated_at = ? WHERE namespace = ? AND leader_id = ? AND term = ?",
		grant:           "UPDATE election_leaders SET leader_id = ?, term = term + 1, lease_expires_at = ?, acquired_at = ?, updated_at = ? WHERE namespace = ? AND term = ?",
		vacate:          "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ?",
		vacateTerm:      "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = " + now + " WHERE namespace = ? AND leader_id = ? AND term = ?",
		deleteCandidate: "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ?",
		isLeader:        "SELECT COUNT(*) FROM election_leaders WHERE namespace = ? AND leader_id = ? AND lease_expires_at > " + now,
		list:            "SELECT candidate_id FROM election_candidates WHERE namespace = ? AND expires_at > " + now + " ORDER BY candidate_id",
		expired:         "SELECT candidate_id FROM election_candidates WHERE namespace = ? AND expires_at < " + plus,
		prune:           "DELETE FROM election_candidates WHERE namespace = ? AND candidate_id = ? AND expires_at < " + plus,
		selectLeader:    map[dialect.Lock]string{},
	}
	for _, s := range []*string{&q.upsertNow, &q.upsertAt, &q.insertLeader, &q.keepLease, &q.grant, &q.vacate, &q.vacateTerm,
		&q.deleteCandidate, &q.isLeader, &q.list, &q.expired, &q.prune} {
		*s = d.Rebind(*s)
	}
	for _, l := range []dialect.Lock{dialect.NoLock, dialect.ShareLock, dialect.UpdateLock} {
		q.selectLeader[l] = d.SelectLeader(l)
	}
	return q
}
