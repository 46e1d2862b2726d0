package dialect_test

import (
	"context"
	"database/sql"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// awkward are strings an array literal must carry unchanged: quotes,
// backslashes, the literal's own punctuation, spaces, a word PostgreSQL
// reads as NULL when unquoted, and bytes beyond ASCII.
var awkward = []string{
	"plain", `say "hi"`, `back\slash`, `\"`, "{braces}", "a,b", " padded ", "NULL", "null",
	"tab\tand\nnewline", "ünïcödé/租户", "x", `trailing\`,
}

// TestArrayLiterals: TextArray and Int64Array write the literals
// PostgreSQL reads back as the same elements, in order.
func TestArrayLiterals(t *testing.T) {
	if got, want := dialect.TextArray([]string{`a"b`, `c\d`, ""}), `{"a\"b","c\\d",""}`; got != want {
		t.Errorf("TextArray = %s, want %s", got, want)
	}
	if got := dialect.TextArray(nil); got != "{}" {
		t.Errorf("TextArray(nil) = %s, want {}", got)
	}
	if got, want := dialect.Int64Array([]int64{1, -2, math.MaxInt64}), "{1,-2,9223372036854775807}"; got != want {
		t.Errorf("Int64Array = %s, want %s", got, want)
	}

	for _, tg := range testdb.Targets(t) {
		if tg.Name != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			raw := testdb.Raw(t, testdb.Open(t, tg))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			terms := []int64{0, 1, -1, math.MaxInt64, math.MinInt64}
			rows, err := raw.QueryContext(ctx, "SELECT t.s, t.i FROM unnest(CAST($1 AS text[]), CAST($2 AS bigint[])) WITH ORDINALITY AS t(s, i, o) ORDER BY t.o",
				dialect.TextArray(awkward), dialect.Int64Array(terms))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var (
				gotS []string
				gotI []int64
			)
			for rows.Next() {
				var (
					s sql.NullString
					i sql.NullInt64
				)
				if err := rows.Scan(&s, &i); err != nil {
					t.Fatal(err)
				}
				if !s.Valid {
					t.Fatalf("element %d read back as NULL", len(gotS))
				}
				gotS = append(gotS, s.String)
				if i.Valid {
					gotI = append(gotI, i.Int64)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(gotS, awkward) {
				t.Errorf("text[] read back as %q, want %q", gotS, awkward)
			}
			if !slices.Equal(gotI, terms) {
				t.Errorf("bigint[] read back as %v, want %v", gotI, terms)
			}
		})
	}
}

// TestBatchRoundOnPostgres runs one round over namespaces in every state a
// round meets and checks what it renewed, wrote and read: a lease held in
// the term given is renewed; one whose term moved on, one held by another
// candidate and one already expired are not; a namespace without a seat
// row reads as absent; the candidate's row is written in every namespace,
// and the live count counts each candidate once.
func TestBatchRoundOnPostgres(t *testing.T) {
	db := testdb.Open(t, testdb.Only(t, "postgres"))
	raw := testdb.Raw(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	base := testdb.Namespace(t)
	held, moved, other, expired, free := base+`."held"`, base+`.moved\`, base+".other", base+".expired", base+".free"
	names := []string{held, moved, other, expired, free}
	me, them := uuid.New(), uuid.New()
	t.Cleanup(func() {
		for _, tbl := range []string{"election_leaders", "election_candidates"} {
			_, _ = raw.Exec("DELETE FROM "+tbl+" WHERE namespace = ANY (CAST($1 AS text[]))", dialect.TextArray(names))
		}
	})
	seat := func(ns string, leader uuid.UUID, term int64, lease string) {
		t.Helper()
		if _, err := raw.ExecContext(ctx, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
			"VALUES ($1, $2, $3, clock_timestamp() + CAST($4 AS interval), clock_timestamp(), clock_timestamp())", ns, leader, term, lease); err != nil {
			t.Fatal(err)
		}
	}
	seat(held, me, 5, "10 seconds")
	seat(moved, me, 3, "10 seconds")
	seat(other, them, 9, "10 seconds")
	seat(expired, me, 2, "-1 second")
	if _, err := raw.ExecContext(ctx, "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) "+
		"VALUES ($1, $2, now(), now(), clock_timestamp() + interval '10 seconds'), ($3, $2, now(), now(), clock_timestamp() + interval '10 seconds')",
		other, them, held); err != nil {
		t.Fatal(err)
	}

	q, ok := dialect.BatchRound(d, len(names), true, true)
	if !ok {
		t.Fatal("BatchRound: not ok on PostgreSQL")
	}
	if n, ok := dialect.BatchRoundNamespaces(q); !ok || n != len(names) {
		t.Errorf("BatchRoundNamespaces = %d, %v; want %d", n, ok, len(names))
	}
	expire := 7 * time.Second
	rows, err := raw.QueryContext(ctx, q, d.DurationArg(expire), me, "host", 42, "label", dialect.TextArray(names),
		dialect.TextArray([]string{held, moved, expired, other}), dialect.Int64Array([]int64{5, 4, 2, 9}))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		now     time.Time
		leader  uuid.NullUUID
		term    int64
		renewed dialect.Time
		live    int
	}
	got := map[string]row{}
	for rows.Next() {
		var (
			now, exp, acq, renewed dialect.Time
			ns                     sql.NullString
			leader                 uuid.NullUUID
			term                   sql.NullInt64
			live                   int
		)
		if err := rows.Scan(&now, &ns, &leader, &term, &exp, &acq, &renewed, &live); err != nil {
			t.Fatal(err)
		}
		if !ns.Valid {
			t.Fatal("a row without a namespace, though seats exist")
		}
		got[ns.String] = row{now.Time, leader, term.Int64, renewed, live}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()

	if len(got) != 4 {
		t.Fatalf("read %d seats, want 4 (every namespace with a seat row): %v", len(got), got)
	}
	if _, ok := got[free]; ok {
		t.Error("a namespace without a seat row was read as a seat")
	}
	h := got[held]
	if !h.renewed.Valid || h.renewed.Time.Sub(h.now) != expire {
		t.Errorf("held lease: renewed to %v at %v, want %v later", h.renewed, h.now, expire)
	}
	if h.leader.UUID != me || h.term != 5 {
		t.Errorf("held lease read as %v term %d", h.leader, h.term)
	}
	for _, ns := range []string{moved, other, expired} {
		if r := got[ns]; r.renewed.Valid {
			t.Errorf("%s: renewed, though the lease is not the candidate's in the term given", ns)
		}
	}
	for ns, r := range got {
		if r.live != 2 {
			t.Errorf("%s: %d live candidates, want 2", ns, r.live)
		}
	}

	var n int
	if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM election_candidates WHERE candidate_id = $1 AND namespace = ANY (CAST($2 AS text[])) "+
		"AND hostname = 'host' AND pid = 42 AND label = 'label' AND expires_at > clock_timestamp()", me, dialect.TextArray(names)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(names) {
		t.Errorf("%d candidate rows written, want %d", n, len(names))
	}
	var lease dialect.Time
	if err := raw.QueryRowContext(ctx, "SELECT lease_expires_at FROM election_leaders WHERE namespace = $1", moved).Scan(&lease); err != nil {
		t.Fatal(err)
	}
	if lease.Time.Sub(h.now) > 10*time.Second {
		t.Errorf("the lease whose term moved on was extended to %v", lease.Time)
	}
}
