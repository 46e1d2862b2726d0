package dialect

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// A Group's round. A Group (one process, a candidate in many namespaces)
// keeps all its candidacies alive with one member row (schema version 3),
// which its candidate rows point to: a round refreshes that row, renews
// the leases the Group holds, and reads only the seats that concern it:
// those vacant or whose lease ends within a horizon (a lapsing leader's),
// those it holds, and those it has not read yet. So the database writes
// one row per process per round, plus one per lease renewed, and reads the
// process's own seats and the free or expiring ones, never every seat of
// every namespace; with Balance it also counts the live candidates of a
// few sampled namespaces.

// HeldLease is a lease a round renews.
type HeldLease struct {
	Namespace string
	Term      int64
}

// RoundIn is what one round of a Group sends.
type RoundIn struct {
	// Member is the Group's candidate id, and the key of its member row;
	// Hostname, PID and Label are its identity.
	Member          uuid.UUID
	Hostname, Label string
	PID             int
	// Expire is the expiry window: the member row and each lease renewed
	// are extended by it.
	Expire time.Duration
	// Horizon and Lapsed: a seat whose lease ends sooner than Horizon from
	// now, or that became free (lapsed or vacated) less than Lapsed ago,
	// is read. Both zero: no seat is read by its lease's end (a Group in
	// an overload, shedding its attempts).
	Horizon, Lapsed time.Duration
	// Range (PostgreSQL) is the most seats each of the range's readings
	// returns, the seats whose lease ends or ended within those bounds
	// and those of the member rows that lapse within them: a Group can
	// take only so many in a round, and a range of thousands (a crashed
	// process's seats, another's step-down in an overload) cost every
	// process of a fleet the reading and handling of each. 0: all. The
	// other databases read the whole range.
	Range int
	// Joined is how many namespaces the round is for, at least one. Only
	// the count is sent (in the leading comment of PostgreSQL's and
	// MariaDB's round): the range reads the seats of the namespaces
	// where the member has a candidate row.
	Joined int
	// Held are the leases to renew.
	Held []HeldLease
	// Read are namespaces whose seats are read whatever their state: those
	// the Group has not read yet, those it last saw free, and held ones
	// whose row it needs whether or not the renewal changes it. The other
	// held seats are read only when the renewal did not change them (to
	// tell why); a renewed one is reported without a reading (RoundOut).
	// A namespace without a leader row is reported with Exists false.
	Read []string
	// Join are the namespaces whose candidate rows, pointing to the member
	// row, the round writes: those joined since the last round.
	Join []string
	// Sample are, with Balance, the namespaces whose live candidates are
	// counted; none without.
	Sample []string
	// Release (PostgreSQL) takes the member's mark off the seats it holds
	// but does not renew in this round (schema version 5): set it when
	// the Group stopped leading a seat since its last round that
	// succeeded, or a round failed (its renewal may have landed).
	Release bool
}

// RoundSeat is a seat as a round read it.
type RoundSeat struct {
	Namespace         string
	Exists            bool // the namespace has a leader row
	Leader            uuid.NullUUID
	Term              int64
	Expires, Acquired Time
}

// RoundOut is what a round returned.
type RoundOut struct {
	// Now is the database clock the round read; Sent is the local time
	// before the reading was sent.
	Now, Sent time.Time
	// Seats are the seats read: each of Held and Read, and every other
	// joined one that is vacant or whose lease ends within the horizon. A
	// held seat that was renewed may come without a reading (PostgreSQL):
	// its Leader is the member, its Term the lease's and Expires the new
	// end, and Acquired is unset.
	Seats []RoundSeat
	// Renewed maps each namespace whose lease the round renewed to the
	// lease's new end.
	Renewed map[string]time.Time
	// Live is, with Sample, the most live candidates of one sampled
	// namespace, the member counted once whether or not its rows are live
	// yet; 0 without Sample.
	Live int
	// Doubtful reports (MySQL family) that more leases read as renewed
	// than the renewal changed rows: Renewed is then empty.
	Doubtful bool
	// Lapsed reports (PostgreSQL, MariaDB) that the member row was
	// missing, or expired for longer than the expiry window, before the
	// round refreshed it: a prune may have deleted the member's candidate
	// rows, which the round then writes again.
	Lapsed bool
	// Truncated reports (PostgreSQL) that a reading of the range returned
	// In.Range seats, and may have left others out: seats found by
	// neither a range nor a reading by key since may then have lapsed
	// unseen.
	Truncated bool
}

// GroupRound runs one round of a Group on conn, each statement committing
// by itself: on PostgreSQL one statement, on MariaDB one compound
// statement (mariaRoundSQL); elsewhere the renewal (when leases are held,
// first: it must answer within the trust window), the member row, the
// candidate rows joined (when there are) and the reading, in that order,
// so that the reading begins after the renewal committed. The leases of
// Held that are missing from Renewed were not renewed: their term ended,
// their lease lapsed, or (PostgreSQL, SQLite) another transaction vacated
// the seat while the renewal waited for its row.
func GroupRound(ctx context.Context, conn gorm.ConnPool, d Dialect, in RoundIn) (RoundOut, error) {
	out := RoundOut{Renewed: map[string]time.Time{}}
	p := d.(pieces)
	if _, ok := d.(postgres); ok {
		nss, terms, held := make([]string, len(in.Held)), make([]int64, len(in.Held)), make(map[string]bool, len(in.Held))
		for i, h := range in.Held {
			nss[i], terms[i], held[h.Namespace] = h.Namespace, h.Term, true
		}
		// The seats read whatever their state are sent in two arrays:
		// those held, read by key, and the others, read as the plan sees
		// fit (pgRound). The other held seats come back only when the
		// renewal did not change them.
		var heldRead, otherRead []string
		for _, ns := range in.Read {
			if held[ns] {
				heldRead = append(heldRead, ns)
			} else {
				otherRead = append(otherRead, ns)
			}
		}
		out.Sent = time.Now()
		rows, err := conn.QueryContext(ctx, pgRound(d, in.Joined), in.Member, in.Hostname, int64(in.PID), in.Label,
			d.DurationArg(in.Expire), TextArray(in.Join), TextArray(nss), Int64Array(terms),
			d.DurationArg(in.Horizon), TextArray(in.Sample), TextArray(otherRead), d.DurationArg(-in.Lapsed), in.Release,
			TextArray(heldRead), int64(max(in.Range, 0)))
		if err != nil {
			return out, err
		}
		changed, _, err := out.scan(rows, in, pgCols)
		if err != nil {
			return out, err
		}
		renewedUnread(&out, in, changed)
		return out, nil
	}
	// The other databases read every held seat: a renewal without
	// RETURNING is known by its reading.
	in.Read = withHeld(in.Read, in.Held)
	if m, ok := d.(mysql); ok && m.compound {
		return mariaGroupRound(ctx, conn, in)
	}

	returned, inferred, changed := map[string]time.Time{}, false, int64(0)
	beaten := false // the member row refreshed
	if _, ok := d.(mysql); ok && len(in.Held) > 0 {
		// One statement renews and refreshes the member row (which must
		// exist: a round's first refresh creates it).
		args := []any{in.Member, in.Member}
		for _, h := range in.Held {
			args = append(args, h.Namespace, h.Term)
		}
		args = append(args, d.DurationArg(in.Expire), in.Hostname, int64(in.PID), in.Label, d.DurationArg(in.Expire))
		res, err := conn.ExecContext(ctx, finish(d, myRenewBeat(len(in.Held))), args...)
		if err == nil {
			changed, err = res.RowsAffected()
		}
		if err != nil {
			return out, err
		}
		if changed > 0 {
			beaten, changed = true, changed-1
			if changed == int64(len(in.Held)) {
				last, err := res.LastInsertId()
				if err != nil {
					return out, err
				}
				for _, h := range in.Held {
					returned[h.Namespace] = BatchRenewedAt(last)
				}
			}
			inferred = len(returned) == 0
		}
	}
	if len(in.Held) > 0 && !beaten {
		args := []any{d.DurationArg(in.Expire), in.Member}
		for _, h := range in.Held {
			args = append(args, h.Namespace, h.Term)
		}
		if q, ok := BatchRenewReturning(d, len(in.Held)); ok {
			rows, err := conn.QueryContext(ctx, q, args...)
			if err != nil {
				return out, err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					ns  string
					exp Time
				)
				if err := rows.Scan(&ns, &exp); err != nil {
					return out, err
				}
				returned[ns] = exp.Time
			}
			if err := rows.Err(); err != nil {
				return out, err
			}
			rows.Close()
		} else {
			res, err := conn.ExecContext(ctx, BatchRenew(d, len(in.Held)), args...)
			var last int64
			if err == nil {
				changed, err = res.RowsAffected()
			}
			if err == nil && changed == int64(len(in.Held)) {
				// Every lease renewed, to one expiry.
				last, err = res.LastInsertId()
				for _, h := range in.Held {
					returned[h.Namespace] = BatchRenewedAt(last)
				}
			}
			if err != nil {
				return out, err
			}
			inferred = len(returned) == 0
		}
	}
	// The member row after the renewal, which must answer first.
	if !beaten {
		if _, err := conn.ExecContext(ctx, finish(d, memberBeat(p)), in.Member, in.Hostname, int64(in.PID), in.Label, d.DurationArg(in.Expire)); err != nil {
			return out, err
		}
	}
	if len(in.Join) > 0 {
		args := make([]any, 0, 6*len(in.Join))
		for _, ns := range in.Join {
			args = append(args, ns, in.Member, in.Hostname, int64(in.PID), in.Label, in.Member)
		}
		if _, err := conn.ExecContext(ctx, finish(d, joinRows(p, len(in.Join))), args...); err != nil {
			return out, err
		}
	}
	if in.Sample == nil && in.Joined == len(in.Held) && len(in.Read) == len(in.Held) && len(returned) == len(in.Held) && len(in.Held) > 0 {
		// The round holds every seat it is for, and renewed them all:
		// there is nothing else to read.
		for _, h := range in.Held {
			exp := returned[h.Namespace]
			out.Now = exp.Add(-in.Expire)
			out.Renewed[h.Namespace] = exp
			out.Seats = append(out.Seats, RoundSeat{Namespace: h.Namespace, Exists: true, Term: h.Term,
				Leader: uuid.NullUUID{UUID: in.Member, Valid: true}, Expires: Time{Time: exp, Valid: true}})
		}
		out.Sent = time.Now()
		return out, nil
	}
	args := make([]any, 0, len(in.Read)+len(in.Sample)+4)
	for _, ns := range in.Sample {
		args = append(args, ns)
	}
	if len(in.Sample) > 0 {
		args = append(args, in.Member)
	}
	args = append(args, p.freeArgs(d.DurationArg(-in.Lapsed), d.DurationArg(in.Horizon))...)
	args = append(args, in.Member)
	args = append(args, anyStrings(in.Read)...)
	out.Sent = time.Now()
	rows, err := conn.QueryContext(ctx, finish(d, readSeats(p, len(in.Read), len(in.Sample))), args...)
	if err != nil {
		return out, err
	}
	if _, _, err := out.scan(rows, in, readCols); err != nil {
		return out, err
	}
	// The reading began after the renewal committed: a lease is renewed
	// when the renewal says so, or, without RETURNING, when the reading
	// shows it held in its term and live, which only this renewal can
	// have made it, a term never returning to a candidate once it left.
	seats := make(map[string]RoundSeat, len(out.Seats))
	for _, s := range out.Seats {
		seats[s.Namespace] = s
	}
	for _, h := range in.Held {
		s := seats[h.Namespace]
		if !s.Leader.Valid || s.Leader.UUID != in.Member || s.Term != h.Term || !s.Expires.Time.After(out.Now) {
			continue
		}
		if exp, ok := returned[h.Namespace]; ok || inferred {
			if ok && exp.After(s.Expires.Time) {
				s.Expires.Time = exp
			}
			out.Renewed[h.Namespace] = s.Expires.Time
		}
	}
	if inferred && int64(len(out.Renewed)) > changed {
		clear(out.Renewed)
		out.Doubtful = true
	}
	return out, nil
}

// renewedUnread completes a PostgreSQL round's Renewed and Seats with the
// held seats it renewed but did not read (pgRound): each one held by the
// member in its term, to the round's clock plus the expiry window, as
// the renewal wrote it. changed is the count of the rows the renewal
// changed; when the seats read as renewed and those unread do not add up
// to it, what the round says of its leases cannot be trusted, and none is
// reported renewed (Doubtful), as on the MySQL family.
func renewedUnread(out *RoundOut, in RoundIn, changed int64) {
	if len(in.Held) == 0 {
		return
	}
	read := make(map[string]bool, len(out.Seats))
	for _, s := range out.Seats {
		read[s.Namespace] = true
	}
	exp := out.Now.Add(in.Expire.Truncate(time.Microsecond))
	for _, h := range in.Held {
		if !read[h.Namespace] {
			out.Renewed[h.Namespace] = exp
			out.Seats = append(out.Seats, RoundSeat{Namespace: h.Namespace, Exists: true, Term: h.Term,
				Leader: uuid.NullUUID{UUID: in.Member, Valid: true}, Expires: Time{Time: exp, Valid: true}})
		}
	}
	if int64(len(out.Renewed)) != changed {
		clear(out.Renewed)
		out.Doubtful = true
	}
}

// withHeld returns read with the namespaces of held it lacks added.
func withHeld(read []string, held []HeldLease) []string {
	if len(held) == 0 {
		return read
	}
	in := make(map[string]bool, len(read))
	for _, ns := range read {
		in[ns] = true
	}
	out := slices.Clip(read)
	for _, h := range held {
		if !in[h.Namespace] {
			out = append(out, h.Namespace)
		}
	}
	return out
}

// memberKeep are the member row's columns a round refreshes.
var memberKeep = []string{"hostname", "pid", "label", "last_heartbeat_at", "expires_at"}

// memberBeat creates or refreshes a member row from one reading of the
// clock: member id, hostname, pid, label, expiry window.
func memberBeat(p pieces) string {
	return "INSERT INTO election_members (member_id, hostname, pid, label, registered_at, last_heartbeat_at, expires_at) " +
		"SELECT ?, ?, ?, ?, t.n, t.n, " + p.plus("t.n") + " FROM (SELECT " + p.now() + " AS n LIMIT 1) t WHERE 1 = 1 " +
		p.upsert([]string{"member_id"}, memberKeep)
}

// joinKeep are the columns a member's candidate row refreshes when it is
// written again.
var joinKeep = []string{"last_heartbeat_at", "expires_at", "hostname", "pid", "label", "member_id"}

// joinRows writes n candidate rows of a member, live only through it
// (their own expiry is their registration): per row, namespace, candidate
// id, hostname, pid, label, member id.
func joinRows(p pieces, n int) string {
	now := p.now()
	row := "(?, ?, " + now + ", " + now + ", " + now + ", ?, ?, ?, ?)"
	return insertMemberCandidate + "VALUES " + strings.Repeat(row+", ", n-1) + row + " " + p.upsert(candidateKey, joinKeep)
}

const insertMemberCandidate = "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at, hostname, pid, label, member_id) "

// readSeats is the reading of a round but PostgreSQL's: parameters are the
// sampled namespaces and the member id (when sample > 0), the time since a
// seat became free (a negative duration) and the horizon (a duration), as
// freeArgs gives them, the member id, then the namespaces read whatever
// their state. An index (freeBetween) finds the seats that lapse or were
// vacated lately without visiting the others; of those, the namespaces where the member has a
// candidate row (the round wrote those it joins before this reading) are
// read, each by one probe of that row's key. The joined namespaces are not
// sent: the statement costs the seats it reads, not the namespaces joined.
func readSeats(p pieces, read, sample int) string {
	live := "0"
	if sample > 0 {
		live = "(SELECT COALESCE(MAX(x.k), 0) + 1 FROM (SELECT COUNT(*) AS k FROM election_candidates e" + withMember("e") +
			" WHERE e.namespace IN (" + marks(sample) + ") AND " + liveCandidate("e", p.now()) +
			" AND e.candidate_id <> ? GROUP BY e.namespace) x)"
	}
	at := stmtNow(p)
	where := "(" + p.freeBetween(p.plus(at), p.plus(at)) +
		" AND EXISTS (SELECT 1 FROM election_candidates c WHERE c.namespace = l.namespace AND c.candidate_id = ?))"
	if read > 0 {
		where += " OR l.namespace IN (" + marks(read) + ")"
	}
	// The seats in a derived table joined ON 1 = 1, not in the ON clause:
	// TiDB refuses a subquery there ("ON condition doesn't support
	// subqueries yet").
	return "SELECT t.n, s.namespace, s.leader_id, s.term, s.lease_expires_at, s.acquired_at, t.k FROM (SELECT " + p.now() +
		" AS n, " + live + " AS k LIMIT 1) t LEFT JOIN (SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at, l.acquired_at " +
		"FROM election_leaders l WHERE " + where + ") s ON 1 = 1"
}

// roundTag begins every PostgreSQL round: a comment that names the number
// of namespaces in it, since they travel in one array parameter.
const roundTag = "/* sqlelect round: "

// GroupRoundNamespaces reports whether q is a Group's round of one
// statement, on PostgreSQL or MariaDB, and over how many namespaces (for
// tools that count statements).
func GroupRoundNamespaces(q string) (n int, ok bool) {
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

// MemberRows lists the namespaces where a member has a candidate row that
// points to its member row: member id (a Group's candidate rows carry
// its member id as their candidate id). A Group reads them after a
// round found its member row lapsed, when a prune may have deleted some:
// those missing are written again, the others are not. The round committed
// the member row's refresh before, so no prune deletes one of them after
// this reading (Prune deletes a row by its key only while it is expired).
// It reads through the index on the member (schema version 4,
// election_candidates_member), not by scanning the candidate rows of every
// process: at 40,000 namespaces x 16 processes each lapse scanned 640,000
// rows, while the rounds that had come too late to keep the member row
// alive were those of a database already overloaded. Without the index
// (a schema not migrated to version 4) the table is scanned.
func MemberRows(d Dialect) string {
	return finish(d, "SELECT namespace FROM election_candidates WHERE member_id = ? AND candidate_id = member_id")
}

// MemberGone deletes a member row: member id. A Group that stops deletes
// it after its candidate rows.
//
// On PostgreSQL the seats still marked as the member's (schema version 5:
// a vacate that failed, a lease left to lapse) lose the mark in the same
// statement: without its member row, nothing else would find them.
func MemberGone(d Dialect) string {
	if _, ok := d.(postgres); ok {
		return finish(d, unmark("$1", "")+"DELETE FROM election_members WHERE member_id = $1")
	}
	return finish(d, "DELETE FROM election_members WHERE member_id = ?")
}

// unmark begins a PostgreSQL statement that deletes member rows: a WITH
// item that takes the member's mark off the seats it held (schema version
// 5), so that their lease's end is in free_at again, where a Group's round
// finds it. member is the member id's parameter; when is a further
// condition on the member row.
func unmark(member, when string) string {
	return "WITH u AS (UPDATE election_leaders SET member_id = NULL, updated_at = clock_timestamp() WHERE member_id = " + member +
		" AND EXISTS (SELECT 1 FROM election_members WHERE member_id = " + member + when + ")) "
}

func anyStrings(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// TakeSeats grants every free seat of nss to the member in one statement,
// as TakeSeat does one, on PostgreSQL and on MariaDB (mariaTake): a
// namespace without a leader row gets one in term 1; an existing seat that
// reads vacant or lapsed is locked, the clock read after its lock, and
// granted in the next term if it is still vacant or lapsed, with the
// lapsed term ended as expired in the history and the new one recorded. A
// seat found held is left alone, unlocked, and so is one whose row another
// transaction has locked (SKIP LOCKED: a renewal, a vacate, another take),
// so that a batch never waits for a leader's renewal nor makes one wait;
// the next round or wake-up tries it again. It returns the grants and, on
// PostgreSQL, the seats its snapshot showed held by another candidate's
// live lease (Taken); ok is false on the other databases, whose Groups
// take seats one at a time.
// The member's candidate rows are not touched: its member row keeps them.
// nss holds at most SeatsPerTake(d) namespaces. It runs outside any
// transaction: MariaDB's statement holds one of its own.
func TakeSeats(ctx context.Context, conn gorm.ConnPool, d Dialect, member uuid.UUID, nss []string, expire time.Duration,
	hostname string, pid int, label, expired string) (t Taken, ok bool, err error) {
	switch d := d.(type) {
	case postgres:
	case mysql:
		if !d.compound {
			return Taken{}, false, nil
		}
		t.Grants, err = mariaTakeSeats(ctx, conn, member, nss, expire, hostname, pid, label, expired)
		return t, true, err
	default:
		return Taken{}, false, nil
	}
	rows, err := conn.QueryContext(ctx, finish(d, pgTakeSeats()), TextArray(nss), member, d.DurationArg(expire), hostname, int64(pid), label, expired)
	if err != nil {
		return Taken{}, true, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			s   = RoundSeat{Exists: true}
			now Time
		)
		if err := rows.Scan(&s.Namespace, &s.Term, &s.Expires, &s.Acquired, &s.Leader, &now); err != nil {
			return Taken{}, true, err
		}
		t.Now = now.Time
		if !s.Leader.Valid {
			s.Leader = uuid.NullUUID{UUID: member, Valid: true}
			t.Grants = append(t.Grants, s)
		} else {
			t.Held = append(t.Held, s)
		}
	}
	return t, true, rows.Err()
}

// Taken is what TakeSeats returned.
type Taken struct {
	// Grants are the seats granted to the member.
	Grants []RoundSeat
	// Held are the seats the statement's snapshot showed held by another
	// candidate's live lease (PostgreSQL only; none elsewhere), as a
	// round's reading of them would, on the database clock Now: at a cold
	// start most seats a take misses were taken by another a moment
	// before, and a Group that knew only that it missed them read them
	// again, round after round, until a reading showed the holder. A seat
	// another take inserted or had locked is in neither list (the
	// snapshot predates it).
	Held []RoundSeat
	Now  time.Time
}

// pgTakeSeats is TakeSeats' statement. Parameters: the namespaces (a text
// array), member id, expiry window, hostname, pid, label, the end reason of
// a lapsed term. It returns the grants (no holder), then the seats of the
// namespaces its snapshot shows held by another's live lease (the holder),
// each with the clock read before the inserts.
//
// It inserts only the namespaces without a row in its snapshot: an insert
// that met a row another take is changing would wait for that take,
// which may be waiting for one of this take's inserts (a deadlock two
// takes over overlapping namespaces found at a cold start). Inserts of
// the same new namespace by two takes still meet, in namespace order.
func pgTakeSeats() string {
	p := postgres{}
	id, identity := "CAST($2 AS uuid)", "CAST($4 AS text), CAST($5 AS bigint), CAST($6 AS text)"
	plus := func(t string) string { return t + " + CAST($3 AS bigint) * interval '1 microsecond'" }
	return "WITH w AS (SELECT DISTINCT unnest(CAST($1 AS text[])) AS ns), " +
		"c AS (SELECT clock_timestamp() AS n), " +
		"i AS (INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) " +
		"SELECT w.ns, " + id + ", 1, " + plus("c.n") + ", c.n, c.n FROM w, c " +
		"WHERE NOT EXISTS (SELECT 1 FROM election_leaders e WHERE e.namespace = w.ns) ORDER BY w.ns ON CONFLICT (namespace) DO NOTHING " +
		"RETURNING namespace, term, lease_expires_at, acquired_at), " +
		"k AS (SELECT l.namespace, l.leader_id, l.term, l.lease_expires_at FROM election_leaders l JOIN w ON w.ns = l.namespace " +
		"WHERE l.leader_id IS NULL OR l.lease_expires_at <= clock_timestamp() ORDER BY l.namespace FOR UPDATE OF l SKIP LOCKED), " +
		"s AS (SELECT clock_timestamp() AS n, k.* FROM k), " +
		"g AS (UPDATE election_leaders AS t SET leader_id = " + id + ", term = t.term + 1, lease_expires_at = " + plus("s.n") +
		", acquired_at = s.n, updated_at = s.n FROM s WHERE t.namespace = s.namespace AND t.term = s.term " +
		"AND (s.leader_id IS NULL OR s.lease_expires_at <= s.n) " +
		"RETURNING t.namespace, t.term, t.lease_expires_at, t.acquired_at, s.leader_id AS old, s.term AS old_term, s.lease_expires_at AS old_end), " +
		"x AS (UPDATE election_history AS o SET ended_at = g.old_end, end_reason = $7 FROM g " +
		"WHERE o.namespace = g.namespace AND o.term = g.old_term AND g.old IS NOT NULL AND o.ended_at IS NULL), " +
		"a AS (SELECT namespace, term, lease_expires_at, acquired_at FROM g UNION ALL SELECT namespace, term, lease_expires_at, acquired_at FROM i), " +
		"h AS (" + insertTerm + "SELECT a.namespace, a.term, " + id + ", " + identity + ", a.acquired_at FROM a " + termUpsert(p) + ") " +
		"SELECT a.namespace, a.term, a.lease_expires_at, a.acquired_at, CAST(NULL AS uuid), c.n FROM a, c " +
		"UNION ALL SELECT l.namespace, l.term, l.lease_expires_at, l.acquired_at, l.leader_id, c.n " +
		"FROM election_leaders l JOIN w ON w.ns = l.namespace, c " +
		"WHERE l.leader_id IS NOT NULL AND l.leader_id <> " + id + " AND l.lease_expires_at > c.n " +
		"AND NOT EXISTS (SELECT 1 FROM a WHERE a.namespace = l.namespace)"
}

// OneStatementRound reports whether a Group's round is one statement on d,
// one round trip: on PostgreSQL (pgRound) and MariaDB (mariaRoundSQL),
// whose rounds also read the member row as it was (RoundOut.Lapsed).
func OneStatementRound(d Dialect) bool {
	switch d := d.(type) {
	case postgres:
		return true
	case mysql:
		return d.compound
	}
	return false
}

// TakesSeatsAtOnce reports whether d grants many seats in one statement
// (TakeSeats).
func TakesSeatsAtOnce(d Dialect) bool { return SeatsPerTake(d) > 0 }

// SeatsPerTake is the most namespaces one TakeSeats carries on d: none
// where it takes none; on PostgreSQL, whose arrays travel as parameters,
// as many as a Group may try at once.
func SeatsPerTake(d Dialect) int {
	switch d := d.(type) {
	case postgres:
		return math.MaxInt
	case mysql:
		if d.compound {
			return mariaTakeMax
		}
	}
	return 0
}

// FirstJoins is the most candidate rows a Group's first round writes on
// d (internal/pace doubles it after each quick round): 4,096 on
// PostgreSQL, whose round carries them in one array parameter; 1,024
// elsewhere, where each row is six parameters of one INSERT. At 4,096,
// 10,000 namespaces x 16 processes on PostgreSQL are all led about a
// second sooner from a cold start than at 1,024 (docs/performance.md),
// while a TiDB Group of 4,396 namespaces took no seat in a minute.
func FirstJoins(d Dialect) int {
	if _, ok := d.(postgres); ok {
		return 4096
	}
	return 1024
}

// stmtNow is the database clock as of the statement's start: constant for
// the statement, so that it can bound an index scan. It serves to choose
// what to read, never to judge a lease.
func stmtNow(p pieces) string {
	switch p.(type) {
	case postgres:
		return "statement_timestamp()"
	case mysql:
		return "NOW(6)"
	}
	return p.now()
}

// myRenewBeat is, on MySQL, MariaDB and TiDB, BatchRenew of n leases and
// the refresh of the member row in one statement, from one reading of the
// clock: parameters are the member id (twice), n pairs of namespace and
// term, the expiry window, hostname, pid, label, the expiry window. It
// changes the member row, and each lease it renews, to one new expiry
// returned as the last insert id; when the member row is missing it
// changes nothing.
func myRenewBeat(n int) string {
	var b strings.Builder
	b.WriteString("UPDATE (SELECT SYSDATE(6) AS n LIMIT 1) t STRAIGHT_JOIN election_members m ON m.member_id = ? " +
		"LEFT JOIN election_leaders l ON l.leader_id = ? AND l.lease_expires_at > SYSDATE(6) AND (")
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(l.namespace = ? AND l.term = ?)")
	}
	b.WriteString(") SET l.lease_expires_at = TIMESTAMP('1970-01-01') + INTERVAL LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', t.n) + ?) MICROSECOND, " +
		"l.updated_at = t.n, m.hostname = ?, m.pid = ?, m.label = ?, m.last_heartbeat_at = t.n, m.expires_at = t.n + INTERVAL ? MICROSECOND")
	return b.String()
}
