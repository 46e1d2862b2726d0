package dialect_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupRoundReadsItsSeatsByKey: on PostgreSQL a Group's round renews
// the seats it holds through the primary key, never by a scan
// of the leaders table. A scan costs every seat of every namespace in each
// round of each process (namespaces x processes rows per interval, the
// cost the Group exists to avoid); the planner chose it for an array of an
// eighth of the seats, a process's share in a fleet of 8, once the table
// was analyzed. (The seats it reads but does not hold, thousands at a
// cold start, may still be scanned for: the round here reads none.)
// The server's own counters (pg_stat_xact_user_tables, read before and
// after the round in its transaction) say what it read.
func TestGroupRoundReadsItsSeatsByKey(t *testing.T) {
	raw, d := openPostgres(t)
	ctx := context.Background()
	const n = 4000
	_, in := seedSeats(t, raw, "zz-round-reads-", n)
	if _, err := raw.ExecContext(ctx, "ANALYZE election_leaders, election_candidates"); err != nil {
		t.Fatal(err)
	}
	var total int
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_leaders").Scan(&total); err != nil {
		t.Fatal(err)
	}
	// Twice each way the server may plan it (for the arrays given, or
	// once for any, as a prepared statement run often may be): the first
	// round writes the member row, the next ones are steady. Then once
	// each way with a tenth of the seats vacated by another: those the
	// round holds but cannot renew, which it reads, by key too.
	lost := map[string]bool{}
	for round := 1; round <= 6; round++ {
		mode := "force_custom_plan"
		if round == 3 || round == 4 || round == 6 {
			mode = "force_generic_plan"
		}
		if round == 5 {
			var nss []string
			for i, h := range in.Held {
				if i%10 == 0 {
					lost[h.Namespace] = true
					nss = append(nss, h.Namespace)
				}
			}
			if _, err := raw.ExecContext(ctx, "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL WHERE namespace = ANY(CAST($1 AS text[]))",
				dialect.TextArray(nss)); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		before, err := leaderReads(ctx, tx)
		if err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		out, err := dialect.GroupRound(ctx, tx, d, in)
		if err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		after, err := leaderReads(ctx, tx)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		scans, scanned, fetched := after[0]-before[0], after[1]-before[1], after[2]-before[2]
		if len(out.Seats) != len(in.Held) || len(out.Renewed) != len(in.Held)-len(lost) {
			t.Fatalf("round %d: %d seats read, %d renewed; want %d and %d", round, len(out.Seats), len(out.Renewed), len(in.Held), len(in.Held)-len(lost))
		}
		for _, s := range out.Seats {
			if _, renewed := out.Renewed[s.Namespace]; renewed == lost[s.Namespace] || lost[s.Namespace] && (!s.Exists || s.Leader.Valid) {
				t.Fatalf("round %d: %+v renewed %v, lost %v: want the lost ones read, vacant, and the others renewed", round, s, renewed, lost[s.Namespace])
			}
		}
		t.Logf("round %d (%s): %d seats held of %d leader rows; %d scans reading %d rows, %d rows fetched by index",
			round, mode, len(in.Held), total, scans, scanned, fetched)
		if scans != 0 {
			t.Errorf("round %d (%s) scanned the leaders table %d times (%d rows read) for %d seats held of %d",
				round, mode, scans, scanned, len(in.Held), total)
		}
		// Each held seat is read by the renewal alone (a round reads no
		// seat it renewed), and may be fetched twice (a heap-only update
		// leaves the version before it on the chain until the page is
		// pruned). Read again after the renewal, as rounds did, each one
		// was fetched twice more.
		// The lost ones are fetched once more, when read.
		if limit := 2 * int64(len(in.Held)+len(lost)); fetched > limit {
			t.Errorf("round %d (%s) fetched %d leader rows by index for %d seats held, %d of them lost; want at most %d",
				round, mode, fetched, len(in.Held), len(lost), limit)
		}
	}
}

// leaderReads reads the server's counters of the leaders table as this
// backend has them so far: sequential scans, the rows they read, the rows
// fetched through an index. On PostgreSQL 15 and later they include what
// the backend's earlier transactions did and have not reported yet, so a
// statement's share is a difference of two readings.
func leaderReads(ctx context.Context, tx *sql.Tx) (c [3]int64, err error) {
	err = tx.QueryRowContext(ctx, "SELECT COALESCE(seq_scan, 0), COALESCE(seq_tup_read, 0), COALESCE(idx_tup_fetch, 0) "+
		"FROM pg_stat_xact_user_tables WHERE relid = CAST('election_leaders' AS regclass)").Scan(&c[0], &c[1], &c[2])
	return c, err
}

// openPostgres opens the PostgreSQL test database (testdb.Only)
// and returns its pool and dialect.
func openPostgres(tb testing.TB) (*sql.DB, dialect.Dialect) {
	tb.Helper()
	db := testdb.Open(tb, testdb.Only(tb, "postgres"))
	d, err := dialect.For(db)
	if err != nil {
		tb.Fatal(err)
	}
	return testdb.Raw(tb, db), d
}

// seedSeats writes n namespaces named from prefix, each with a live
// candidate row for each of 8 candidates and a seat held by one of them in
// turn for an hour, and deletes them when tb ends. in is the round of the
// first candidate: its Held are its seats (an eighth), which a steady round
// renews without reading them.
func seedSeats(tb testing.TB, raw *sql.DB, prefix string, n int) (names []string, in dialect.RoundIn) {
	tb.Helper()
	ctx := context.Background()
	prefix += uuid.NewString()[:8] + "-"
	names = make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	cands := make([]uuid.UUID, 8)
	for i := range cands {
		cands[i] = uuid.New()
	}
	leaders := make([]string, n)
	in = dialect.RoundIn{Member: cands[0], Hostname: "host", PID: 1, Expire: time.Hour, Horizon: time.Second, Joined: n}
	for i, ns := range names {
		leaders[i] = cands[i%len(cands)].String()
		if cands[i%len(cands)] == in.Member {
			in.Held = append(in.Held, dialect.HeldLease{Namespace: ns, Term: int64(i + 1)})
		}
	}
	tb.Cleanup(func() {
		for _, tbl := range []string{"election_leaders", "election_candidates"} {
			_, _ = raw.Exec("DELETE FROM "+tbl+" WHERE namespace LIKE $1", prefix+"%")
		}
		_, _ = raw.Exec("DELETE FROM election_members WHERE member_id = $1", in.Member)
	})
	if _, err := raw.ExecContext(ctx, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
		"SELECT ns, CAST(l AS uuid), k, clock_timestamp() + interval '1 hour', clock_timestamp(), clock_timestamp() "+
		"FROM unnest(CAST($1 AS text[]), CAST($2 AS text[])) WITH ORDINALITY AS t(ns, l, k)", dialect.TextArray(names), dialect.TextArray(leaders)); err != nil {
		tb.Fatal(err)
	}
	for _, c := range cands {
		if _, err := raw.ExecContext(ctx, "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) "+
			"SELECT ns, $2, now(), now(), clock_timestamp() + interval '1 hour' FROM unnest(CAST($1 AS text[])) AS t(ns)", dialect.TextArray(names), c); err != nil {
			tb.Fatal(err)
		}
	}
	return names, in
}

// TestGroupRoundCutsItsRange: on PostgreSQL a round's range returns at
// most RoundIn.Range seats and says when it stopped there (Truncated),
// so that a crashed process's seats, thousands at once, cost each
// process of a fleet no more than it can take; with no limit, or one
// above the seats in range, it returns them all and is whole.
func TestGroupRoundCutsItsRange(t *testing.T) {
	raw, d := openPostgres(t)
	ctx := context.Background()
	names, in := seedSeats(t, raw, "zz-round-range-", 40)
	var freed []string
	for i, ns := range names {
		if i%8 != 0 { // not the member's own (seedSeats)
			freed = append(freed, ns)
		}
	}
	freed = freed[:20]
	if _, err := raw.ExecContext(ctx, "UPDATE election_leaders SET leader_id = NULL, lease_expires_at = NULL, updated_at = clock_timestamp() WHERE namespace = ANY(CAST($1 AS text[]))",
		dialect.TextArray(freed)); err != nil {
		t.Fatal(err)
	}
	in.Held, in.Lapsed = nil, time.Minute
	for _, c := range []struct {
		limit, want int
		cut         bool
	}{{0, 20, false}, {5, 5, true}, {20, 20, true}, {21, 20, false}} {
		in.Range = c.limit
		out, err := dialect.GroupRound(ctx, raw, d, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range out.Seats {
			if !slices.Contains(freed, s.Namespace) || s.Leader.Valid {
				t.Errorf("range of %d: read %+v, which is not one of the seats freed", c.limit, s)
			}
		}
		if len(out.Seats) != c.want || out.Truncated != c.cut {
			t.Errorf("range of %d: %d seats read, truncated %v; want %d, %v", c.limit, len(out.Seats), out.Truncated, c.want, c.cut)
		}
	}
}

// explainingTx is a transaction that, before it runs a Group's round,
// explains it with the same parameters (a plan for the values given, the
// one a driver's first executions and simple protocol get) and keeps the
// plan's lines.
type explainingTx struct {
	*sql.Tx
	plan []string
}

func (x *explainingTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if _, ok := dialect.GroupRoundNamespaces(q); ok {
		rows, err := x.Tx.QueryContext(ctx, "EXPLAIN (COSTS OFF) "+q, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return nil, err
			}
			x.plan = append(x.plan, line)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return x.Tx.QueryContext(ctx, q, args...)
}

// TestGroupRoundChecksArraysInAHash: on PostgreSQL a Group's round checks
// each seat against its arrays (the held seats' terms, those it keeps
// marked, the namespaces it joins) in a hash built once, whatever the
// arrays' length and work_mem, never by comparing each seat with every
// element. A hash is planned only for a subquery the plan expects to fit in
// work_mem (times hash_mem_multiplier): over an array whose length the plan
// knew, at work_mem 64 kB, the unmarking compared each of 2,500 seats with
// every held namespace (467 ms against 1.5 ms); as a JSON lookup, each
// renewed seat copied every held term (a round of 5,000 seats: 92-97 ms
// against 31-33 ms, BenchmarkGroupRound).
func TestGroupRoundChecksArraysInAHash(t *testing.T) {
	raw, d := openPostgres(t)
	ctx := context.Background()
	names, in := seedSeats(t, raw, "zz-round-hash-", 8000)
	in.Release = true                 // the seats it no longer leads lose its mark
	in.Join = names[len(names)-2000:] // rows written again, as after a lapse
	in.Horizon, in.Lapsed = time.Second, time.Second
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		x := &explainingTx{Tx: tx}
		for _, q := range []string{"SET LOCAL work_mem = '64kB'", "SET LOCAL hash_mem_multiplier = 1", "SET LOCAL plan_cache_mode = " + mode} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				_ = tx.Rollback()
				t.Fatal(err)
			}
		}
		out, err := dialect.GroupRound(ctx, x, d, in)
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Renewed) != len(in.Held) {
			t.Fatalf("%s: %d seats renewed, want %d", mode, len(out.Renewed), len(in.Held))
		}
		if len(x.plan) == 0 {
			t.Fatalf("%s: the round was not explained", mode)
		}
		hashed := 0
		for _, line := range x.plan {
			if strings.Contains(line, "hashed SubPlan") {
				hashed++
			}
			if strings.Contains(line, "IS TRUE") || strings.Contains(line, "IS NOT TRUE") {
				if strings.Contains(line, "(SubPlan") {
					t.Errorf("%s: an array checked without a hash, once for each seat: %s", mode, strings.TrimSpace(line))
				}
			}
			if strings.Contains(line, "->>") || strings.Contains(line, "Nested Loop Anti Join") {
				t.Errorf("%s: %s", mode, strings.TrimSpace(line))
			}
		}
		// The renewal's terms, the marks kept, the namespaces joined in
		// both readings of the range.
		if hashed < 4 {
			t.Errorf("%s: %d hashed subplans in the round's plan, want 4:\n%s", mode, hashed, strings.Join(x.plan, "\n"))
		}
	}
}
