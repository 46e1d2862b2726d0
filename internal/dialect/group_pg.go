package dialect

import "strconv"

// pgRound is the whole round on PostgreSQL, one statement whose
// data-modifying WITH items share one reading of the clock. Its text
// depends on the number of namespaces only through its leading comment:
// they travel as arrays. Parameters: member id, hostname, pid, label,
// expiry window; the namespaces to join; the held leases' namespaces, and
// their terms in the same order; the horizon; the
// sampled namespaces; those read whatever their state that are not held;
// the time since a lease ended (negative); whether to take the member's
// mark off the seats it does not renew (RoundIn.Release); those read
// whatever their state that are held; the most seats each reading of the
// range returns (0: all). Of the other seats held, only those the
// renewal did not change are read; a column counts the renewal's rows
// (RoundOut.Renewed, which GroupRound completes from them), and the last
// tells whether a reading of the range stopped at its limit. The namespaces joined
// are not sent: the range reads the seats of those where the member has
// a candidate row (one probe of its key for each seat in the range), so
// a round costs the seats it reads, not every namespace the Group joined
// (BenchmarkGroupRound at 10,000 namespaces: 19.2-20.6 ms a round against
// 21.8-23.1 ms when they were sent). The candidate rows this statement
// writes are not in its snapshot: the range takes the namespaces it
// joins from their array.
//
// The seats are read from the statement's snapshot, taken before the
// renewal touched any row: a seat vacated by a transaction that committed
// while the renewal waited for its row lock still reads as held, and the
// renewal, which checks the row again once the lock is granted, skips it.
// Only the renewal's expiry, in its own column, says a lease was renewed.
func pgRound(d Dialect, n int) string {
	// LIMIT NULL is no limit.
	const rangeLimit = "NULLIF(CAST($15 AS bigint), 0) "
	until := "c.n + CAST($5 AS bigint) * interval '1 microsecond'"
	// The range's bounds, on free_at or on a member row's expiry, and the
	// namespaces of the range that concern the member.
	within := func(col string) string {
		return col + " > statement_timestamp() + CAST($12 AS bigint) * interval '1 microsecond' " +
			"AND " + col + " < statement_timestamp() + CAST($9 AS bigint) * interval '1 microsecond'"
	}
	const joined = "WHERE (EXISTS (SELECT 1 FROM election_candidates e WHERE e.namespace = l.namespace AND e.candidate_id = $1 OFFSET 0) " +
		"OR l.namespace IN (SELECT unnest(ARRAY(SELECT unnest(CAST($6 AS text[])))))) "
	return finish(d, roundTag+strconv.Itoa(n)+" namespaces */ WITH c AS (SELECT clock_timestamp() AS n), "+
		"m AS (INSERT INTO election_members (member_id, hostname, pid, label, registered_at, last_heartbeat_at, expires_at) "+
		"SELECT $1, CAST($2 AS text), CAST($3 AS bigint), CAST($4 AS text), c.n, c.n, "+until+" FROM c "+
		onConflictUpdate([]string{"member_id"}, memberKeep)+"), "+
		"j AS ("+insertMemberCandidate+"SELECT v.ns, $1, c.n, c.n, c.n, CAST($2 AS text), CAST($3 AS bigint), CAST($4 AS text), $1 "+
		"FROM c, unnest(CAST($6 AS text[])) AS v(ns) "+onConflictUpdate(candidateKey, joinKeep)+"), "+
		// The renewal marks each seat as the member's (member_id), which
		// the first renewal of a term changes and the others rewrite
		// unchanged: no indexed column changes, so a renewal is a
		// heap-only update, with no new index entry (schema version 5).
		// Its seats are found by key (namespace = ANY, one probe of the
		// primary key each) and each one's term is checked in a hash of
		// the pairs, built once (a hashed subplan: IS TRUE keeps it a
		// filter, not a join). Joined to the arrays instead, the planner
		// chose a scan of every seat as soon as the table was compact
		// (its renewals leaving no dead rows behind), and a generic plan
		// of the same join with namespace = ANY compared every seat with
		// every namespace. Looked up in a JSON object of the terms, each
		// seat copied the whole object: 2,500 seats took 13.9 ms against
		// 8.1 ms so, 20,000 seats 694 ms against 107 ms (EXPLAIN ANALYZE,
		// generic plans). Each array is built by a subquery
		// (ANY(ARRAY(SELECT unnest(...)))), so that no plan knows its
		// length: a plan made for the array given chose a scan of every
		// seat for a process's share of them (500 of 4,000, an eighth),
		// so every round of every process read the whole table
		// (TestGroupRoundReadsItsSeatsByKey). Of the seats read whatever
		// their state, the held ones ($14) are found the same way; the
		// others ($11: not read yet, or free when last read, thousands
		// at a cold start) in the array itself, for which a plan may
		// choose a scan when they are a large part of the table, as it
		// should (a round reading 8,192 of 20,000 seats took 55-65 ms so,
		// 75-100 ms with each probed by key).
		"r AS (UPDATE election_leaders AS u SET lease_expires_at = "+until+", updated_at = c.n, member_id = $1 "+
		"FROM c WHERE u.namespace = ANY(ARRAY(SELECT unnest(CAST($7 AS text[])))) "+
		"AND ((u.namespace, u.term) IN (SELECT * FROM unnest(ARRAY(SELECT unnest(CAST($7 AS text[]))), ARRAY(SELECT unnest(CAST($8 AS bigint[])))))) IS TRUE "+
		"AND u.leader_id = $1 AND u.lease_expires_at > c.n "+
		"RETURNING u.namespace, u.lease_expires_at), "+
		// With $13, the seats marked as the member's that it does not
		// renew now lose the mark: their lease's end is in free_at again,
		// where the others find it. Only the member's own marked seats
		// are read, through their index, each checked in a hash of those
		// renewed: as NOT EXISTS, the plan built on statistics from before
		// the seats were marked was a nested loop, which would compare each
		// with every namespace held. A hash is planned only for a subquery the
		// plan expects to fit in work_mem: one over the array itself,
		// whose length a plan for the values given knows, was scanned
		// once for each seat instead when the array was long or work_mem
		// small (2,500 seats: 467 ms at 64 kB, 1.5 ms hashed), so every
		// such array is hidden behind ARRAY(SELECT ...), as in r.
		"x AS (UPDATE election_leaders AS u SET member_id = NULL, updated_at = c.n FROM c "+
		"WHERE CAST($13 AS boolean) AND u.member_id = $1 AND (u.namespace IN (SELECT unnest(ARRAY(SELECT unnest(CAST($7 AS text[])))))) IS NOT TRUE), "+
		// Counted once, in a WITH item of its own: as a subquery of the
		// SELECT list it would be counted again for every seat. Each
		// sampled namespace is counted by itself (LATERAL), so that its
		// rows are found through the primary key, whatever the planner
		// estimates of the array: a join may scan every candidate row.
		"k AS (SELECT COALESCE(MAX(x.k), 0) + 1 AS n FROM c, unnest(CAST($10 AS text[])) AS a(ns) "+
		"CROSS JOIN LATERAL (SELECT COUNT(*) AS k FROM election_candidates e"+withMember("e")+
		" WHERE e.namespace = a.ns AND "+liveCandidate("e", "c.n")+" AND e.candidate_id <> $1) x), "+
		// The seats whose lease ends within the horizon, or that became
		// free a short while ago (lapsed or vacated), found through the
		// index on free_at without visiting the others (the statement's
		// time, stable, can bound an index scan; the clock's cannot), then
		// those read whatever their state, by key. Of the range, only
		// the namespaces the member has a candidate row in, or joins now.
		// OFFSET 0 keeps the range a scan of its own, and the EXISTS a
		// probe of one key per seat: without it, for a range of some
		// thousands of seats (an overload, a crashed process's leases
		// lapsing together) the planner hashes every candidate row of
		// the member instead, a scan of the whole table (at 40,000 x 16,
		// 640,000 rows in each round of each process).
		// Each reading of the range stops at $15 seats (RoundIn.Range;
		// none when 0), in the order of the index: those that lapsed
		// longest ago first, the next leave the range soonest. The limit
		// stands outside a subquery of its own (OFFSET 0), which is
		// planned as it was without one: told of a limit, the planner
		// joined the lapsing member rows from the member's own marked
		// seats, a fetch of every seat it renews.
		"f AS (SELECT * FROM (SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT * FROM election_leaders "+
		"WHERE "+within("free_at")+" OFFSET 0) l "+joined+"OFFSET 0) q LIMIT "+rangeLimit+"), "+
		// A seat a Group renews has no free_at: it lapses with that
		// Group's member row, so the member rows that lapse within the
		// same bounds lead to their seats (the index on member_id).
		"y AS (SELECT * FROM (SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT member_id FROM election_members "+
		"WHERE "+within("expires_at")+" AND member_id <> $1 OFFSET 0) mm "+
		"JOIN election_leaders l ON l.member_id = mm.member_id AND l.leader_id = mm.member_id "+joined+"OFFSET 0) q LIMIT "+rangeLimit+"), "+
		"s AS (SELECT * FROM f UNION SELECT * FROM y "+
		"UNION SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at "+
		"FROM election_leaders l WHERE l.namespace = ANY(ARRAY(SELECT unnest(CAST($14 AS text[])))) "+
		// The held seats the renewal did not change, each probed by key
		// once they are known (OFFSET 0 keeps the renewal's rows taken
		// away first, the LIMIT the probe a nested loop: joined, the
		// planner hashes every seat), a missing row as NULLs: a steady round,
		// which renews every seat it holds, returns none of them. The
		// client knows a renewed seat without reading it: its holder,
		// term and new expiry (the clock plus the window) are its own.
		"UNION SELECT h.ns, l.leader_id, l.term, l.lease_expires_at, l.acquired_at "+
		"FROM (SELECT v.ns FROM unnest(CAST($7 AS text[])) AS v(ns) WHERE NOT EXISTS (SELECT 1 FROM r WHERE r.namespace = v.ns) OFFSET 0) h "+
		"LEFT JOIN LATERAL (SELECT * FROM election_leaders l WHERE l.namespace = h.ns LIMIT 1) l ON true "+
		"UNION SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at "+
		"FROM election_leaders l WHERE l.namespace = ANY(CAST($11 AS text[]))), "+
		// The member row as it was before m refreshed it (the snapshot):
		// live, or expired for less than a window, it kept the
		// candidate rows from any prune.
		"o AS (SELECT COUNT(*) AS n FROM c, election_members e WHERE e.member_id = $1 "+
		"AND e.expires_at >= c.n - CAST($5 AS bigint) * interval '1 microsecond') "+
		"SELECT c.n, s.namespace, s.leader_id, s.term, s.lease_expires_at, s.acquired_at, r.lease_expires_at, k.n, o.n, "+
		"(SELECT COUNT(*) FROM r), CAST($15 AS bigint) > 0 AND ((SELECT COUNT(*) FROM f) >= CAST($15 AS bigint) OR (SELECT COUNT(*) FROM y) >= CAST($15 AS bigint)) "+
		"FROM c CROSS JOIN k CROSS JOIN o LEFT JOIN s ON true LEFT JOIN r ON r.namespace = s.namespace")
}
