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

	onPostgres(t, func(t *testing.T, ctx context.Context, raw *sql.DB) {
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

// TestGroupRound runs one round of a Group over namespaces in every state
// a round meets, on every database, and checks what it renewed, wrote and
// read: a lease held in the term given is renewed; one whose term moved
// on, one held by another candidate, one already expired and one whose
// seat row is gone are not; the member row is written, and the candidate
// rows of the namespaces joined, which are live through it; the seats
// read are the vacant and lapsing ones, those held (the ones not renewed
// read although not asked for, a namespace without a seat row as absent)
// and those asked for, never a live seat of another candidate the Group
// did not ask for; and the live count counts each candidate once.
func TestGroupRound(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			raw, ctx, d := roundOn(t, tg)
			q := d.Statements()
			base := testdb.Namespace(t)
			held, moved, other, live, expired, vacant, free, gone := base+`."held"`, base+`.moved\`, base+".other", base+".live",
				base+".expired", base+".vacant", base+".free", base+".gone"
			names := []string{held, moved, other, live, expired, vacant, free, gone}
			me, them := uuid.New(), uuid.New()
			exec := func(query string, args ...any) {
				t.Helper()
				if _, err := raw.ExecContext(ctx, d.Rebind(query), args...); err != nil {
					t.Fatalf("%s: %v", query, err)
				}
			}
			seat := func(ns string, leader *uuid.UUID, term int64, lease time.Duration) {
				t.Helper()
				var l, exp any
				if leader != nil {
					l, exp = *leader, d.TimeArg(time.Now().Add(lease))
				}
				exec("INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
					ns, l, term, exp, d.TimeArg(time.Now()), d.TimeArg(time.Now()))
			}
			seat(held, &me, 5, 10*time.Second)
			seat(moved, &me, 3, 10*time.Second)
			seat(other, &them, 9, 10*time.Second)
			seat(live, &them, 4, 10*time.Second)
			seat(expired, &me, 2, -time.Second)
			seat(vacant, nil, 7, 0)
			for _, ns := range []string{other, held} {
				if _, err := raw.ExecContext(ctx, q.UpsertNow, ns, them, d.DurationArg(10*time.Second), "", 0, ""); err != nil {
					t.Fatal(err)
				}
			}

			expire := 7 * time.Second
			in := dialect.RoundIn{Member: me, Hostname: "host", PID: 42, Label: "label", Expire: expire, Horizon: time.Second, Lapsed: time.Minute,
				Joined: len(names), Join: names,
				Held: []dialect.HeldLease{{Namespace: held, Term: 5}, {Namespace: moved, Term: 4}, {Namespace: expired, Term: 2}, {Namespace: other, Term: 9},
					{Namespace: gone, Term: 1}},
				Read:   []string{free},
				Sample: []string{held, other}}
			conn, err := raw.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			out, err := dialect.GroupRound(ctx, conn, d, in)
			if err != nil {
				t.Fatalf("GroupRound: %v", err)
			}
			got := map[string]dialect.RoundSeat{}
			for _, s := range out.Seats {
				got[s.Namespace] = s
			}
			want := []string{held, moved, other, expired, vacant, free, gone}
			for _, ns := range want {
				if _, ok := got[ns]; !ok {
					t.Errorf("%s: not read", ns)
				}
			}
			if _, ok := got[live]; ok || len(got) != len(want) {
				t.Errorf("read %d seats %v, want exactly %q: another candidate's live seat, not asked for, is not read", len(got), got, want)
			}
			if got[free].Exists || got[gone].Exists || !got[vacant].Exists || got[vacant].Leader.Valid {
				t.Errorf("free %+v, gone %+v, vacant %+v", got[free], got[gone], got[vacant])
			}
			if s := got[moved]; !s.Exists || s.Term != 3 || !s.Leader.Valid || s.Leader.UUID != me {
				t.Errorf("moved on, not renewed: read %+v, want the seat in its own term 3", s)
			}
			if s := got[held]; s.Term != 5 || !s.Leader.Valid || s.Leader.UUID != me || !s.Expires.Valid || !s.Expires.Time.Equal(out.Renewed[held]) {
				t.Errorf("held, renewed: %+v, want the member's in term 5 until %v", s, out.Renewed[held])
			}
			// The renewal reads the clock before the reading does, but on
			// PostgreSQL, where it is one reading.
			if exp, ok := out.Renewed[held]; !ok || exp.Sub(out.Now) > expire || exp.Sub(out.Now) < expire-time.Second {
				t.Errorf("held lease: renewed to %v at %v (%v), want %v later", exp, out.Now, ok, expire)
			}
			if len(out.Renewed) != 1 {
				t.Errorf("renewed %v, want only %s", out.Renewed, held)
			}
			if out.Live != 2 {
				t.Errorf("%d live candidates, want 2", out.Live)
			}
			// The member keeps its candidate rows alive: they are listed
			// as live, with its identity.
			var n int
			if err := raw.QueryRowContext(ctx, d.Rebind("SELECT COUNT(*) FROM election_members WHERE member_id = ? AND hostname = 'host' AND pid = 42"),
				me).Scan(&n); err != nil || n != 1 {
				t.Fatalf("member rows: %d, %v", n, err)
			}
			for _, ns := range names {
				rows, err := raw.QueryContext(ctx, q.List, ns)
				if err != nil {
					t.Fatal(err)
				}
				var ids []uuid.UUID
				for rows.Next() {
					var id uuid.UUID
					if err := rows.Scan(&id); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				rows.Close()
				if !slices.Contains(ids, me) {
					t.Errorf("%s: the member's candidacy is not live: %v", ns, ids)
				}
			}
			// A second round renews the lease again and refreshes the
			// member row (on MySQL in one statement, the row existing now).
			var before dialect.Time
			if err := raw.QueryRowContext(ctx, d.Rebind("SELECT expires_at FROM election_members WHERE member_id = ?"), me).Scan(&before); err != nil {
				t.Fatal(err)
			}
			in.Join, in.Held = nil, []dialect.HeldLease{{Namespace: held, Term: 5}}
			time.Sleep(2 * time.Millisecond)
			out2, err := dialect.GroupRound(ctx, conn, d, in)
			if err != nil {
				t.Fatalf("second GroupRound: %v", err)
			}
			if exp, ok := out2.Renewed[held]; !ok || !exp.After(out.Renewed[held]) {
				t.Errorf("second round: renewed %v, want %s renewed past %v", out2.Renewed, held, out.Renewed[held])
			}
			var after dialect.Time
			if err := raw.QueryRowContext(ctx, d.Rebind("SELECT expires_at FROM election_members WHERE member_id = ?"), me).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if !after.Time.After(before.Time) {
				t.Errorf("the member row was not refreshed: %v, then %v", before.Time, after.Time)
			}
			// Once the member row lapses, so do they.
			exec("UPDATE election_members SET expires_at = ? WHERE member_id = ?", d.TimeArg(time.Now().Add(-time.Second)), me)
			rows, err := raw.QueryContext(ctx, q.List, free)
			if err != nil {
				t.Fatal(err)
			}
			if rows.Next() {
				t.Errorf("%s: a candidate listed though its member expired", free)
			}
			rows.Close()
		})
	}
}

// TestGroupRoundLapsed: where a round is one statement (PostgreSQL,
// MariaDB), it reports a member row that was missing, or expired for
// longer than the expiry window, before it refreshed it (a prune may have
// deleted the member's candidate rows), and not one that was live or
// expired for less.
func TestGroupRoundLapsed(t *testing.T) {
	ran := false
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "sqlite" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			raw, ctx, d := roundOn(t, tg)
			if !dialect.OneStatementRound(d) {
				t.Skipf("%s: a round of several statements", d.Name())
			}
			ran = true
			testRoundLapsed(t, raw, ctx, d)
		})
	}
	if !ran {
		t.Skip("neither PostgreSQL nor MariaDB configured")
	}
}

func testRoundLapsed(t *testing.T, raw *sql.DB, ctx context.Context, d dialect.Dialect) {
	me, ns := uuid.New(), testdb.Namespace(t)
	expire := 2 * time.Second
	in := dialect.RoundIn{Member: me, Hostname: "host", PID: 1, Expire: expire, Horizon: time.Second, Lapsed: time.Minute,
		Joined: 1, Read: []string{ns}}
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	set := "UPDATE election_members SET expires_at = clock_timestamp() + CAST($2 AS bigint) * interval '1 microsecond' WHERE member_id = $1"
	if d.Name() == "mysql" {
		set = "UPDATE election_members SET expires_at = SYSDATE(6) + INTERVAL ? MICROSECOND WHERE member_id = ?"
	}
	for _, c := range []struct {
		name string
		set  time.Duration // the member row's expiry before the round, from now
		want bool
	}{
		{"missing", 0, true},
		{"live", 0, false},
		{"expired for less than a window", -time.Second, false},
		{"expired for longer than a window", -3 * time.Second, true},
	} {
		if c.set != 0 {
			args := []any{me, c.set.Microseconds()}
			if d.Name() == "mysql" {
				args[0], args[1] = args[1], args[0]
			}
			if _, err := raw.ExecContext(ctx, set, args...); err != nil {
				t.Fatal(err)
			}
		}
		out, err := dialect.GroupRound(ctx, conn, d, in)
		if err != nil {
			t.Fatalf("%s: GroupRound: %v", c.name, err)
		}
		if out.Lapsed != c.want {
			t.Errorf("member row %s before the round: Lapsed %v, want %v", c.name, out.Lapsed, c.want)
		}
	}
}

// roundOn opens tg for a test of the Group's round: a raw handle, a
// context of a minute, and the dialect detected (on MariaDB, the one
// whose round is one compound statement).
func roundOn(t *testing.T, tg testdb.Target) (*sql.DB, context.Context, dialect.Dialect) {
	t.Helper()
	db := testdb.Open(t, tg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	d, err := dialect.For(db)
	if err == nil {
		d, err = dialect.Detect(ctx, db, d)
	}
	if err != nil {
		t.Fatal(err)
	}
	return testdb.Raw(t, db), ctx, d
}

// onPostgres runs f in a subtest on PostgreSQL when the tests are pointed
// at it, with a context that ends after a minute.
func onPostgres(t *testing.T, f func(t *testing.T, ctx context.Context, raw *sql.DB)) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			raw := testdb.Raw(t, testdb.Open(t, tg))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f(t, ctx, raw)
		})
	}
}
