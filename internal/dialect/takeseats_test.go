package dialect_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestTakeSeatsSkipsLocked: on PostgreSQL and MariaDB, TakeSeats over a
// free seat, a seat held by another candidate, a free seat whose row
// another transaction has locked, a lapsed seat and a new namespace grants
// the first, the lapsed and the new one and leaves the other two as they
// are, without waiting for the lock: a batch take never waits for a
// leader's renewal nor makes one wait. The lapsed term is ended as
// expired at its expiry, and every term granted is in the history.
func TestTakeSeatsSkipsLocked(t *testing.T) {
	eachTaker(t, func(t *testing.T, tk taker) {
		free, held, locked, lapsed, fresh := tk.base+".free", tk.base+".held", tk.base+".locked", tk.base+".lapsed", tk.base+".new"
		other, me := uuid.New(), uuid.New()
		hour, past := time.Now().Add(time.Hour).UTC(), time.Now().Add(-time.Second).UTC()
		tk.exec(t, "INSERT INTO election_leaders (namespace, term, updated_at) VALUES (?, 4, ?), (?, 0, ?)", free, hour, locked, hour)
		tk.exec(t, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 1, ?, ?, ?), (?, ?, 7, ?, ?, ?)",
			held, other, hour, hour, hour, lapsed, other, past, past, past)
		tk.exec(t, "INSERT INTO election_history (namespace, term, leader_id, hostname, pid, label, acquired_at) VALUES (?, 7, ?, 'h', 1, '', ?)", lapsed, other, past)
		tx, err := tk.raw.BeginTx(tk.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(tk.ctx, tk.bind("SELECT 1 FROM election_leaders WHERE namespace = ? FOR UPDATE"), locked); err != nil {
			t.Fatal(err)
		}

		taken, ok, err := dialect.TakeSeats(tk.ctx, tk.lockTimeoutConn(t), tk.d, me, []string{free, held, locked, lapsed, fresh}, time.Minute, "host", 1, "", "expired")
		if err != nil || !ok {
			t.Fatalf("TakeSeats: ok %v, err %v (a wait for the locked row ends in a lock timeout)", ok, err)
		}
		// On PostgreSQL the take also reports the seat it found held, as a
		// reading would: the holder, the term and the lease's end, on the
		// database clock.
		if tk.name == "postgres" {
			if len(taken.Held) != 1 {
				t.Errorf("held seats reported: %+v, want only %s", taken.Held, held)
			} else if h := taken.Held[0]; h.Namespace != held || h.Leader.UUID != other || h.Term != 1 ||
				h.Expires.Time.Sub(hour).Abs() > time.Millisecond || h.Expires.Time.Sub(taken.Now) < 59*time.Minute {
				t.Errorf("held seat reported as %+v at %v, want %s held by %v in term 1 until %v", h, taken.Now, held, other, hour)
			}
		} else if len(taken.Held) != 0 {
			t.Errorf("held seats reported on %s: %+v, want none", tk.name, taken.Held)
		}
		terms := map[string]int64{}
		for _, g := range taken.Grants {
			terms[g.Namespace] = g.Term
			if g.Leader.UUID != me || !g.Expires.Time.After(g.Acquired.Time) {
				t.Errorf("grant %+v: want a lease of %v", g, me)
			}
		}
		if want := map[string]int64{free: 5, lapsed: 8, fresh: 1}; !mapsEqual(terms, want) {
			t.Errorf("granted %v, want %v", terms, want)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		var leader uuid.NullUUID
		if err := tk.raw.QueryRowContext(tk.ctx, tk.bind("SELECT leader_id FROM election_leaders WHERE namespace = ?"), held).Scan(&leader); err != nil {
			t.Fatal(err)
		}
		if leader.UUID != other {
			t.Errorf("the held seat's leader is %v after TakeSeats, want %v", leader, other)
		}
		var reason sql.NullString
		var ended sql.NullTime
		if err := tk.raw.QueryRowContext(tk.ctx, tk.bind("SELECT end_reason, ended_at FROM election_history WHERE namespace = ? AND term = 7"), lapsed).Scan(&reason, &ended); err != nil {
			t.Fatal(err)
		}
		if reason.String != "expired" || !ended.Valid || ended.Time.Sub(past).Abs() > time.Millisecond {
			t.Errorf("the lapsed term ended %v (%q), want at its expiry %v (expired)", ended, reason.String, past)
		}
		for ns, term := range terms {
			var who uuid.UUID
			if err := tk.raw.QueryRowContext(tk.ctx, tk.bind("SELECT leader_id FROM election_history WHERE namespace = ? AND term = ? AND ended_at IS NULL"), ns, term).Scan(&who); err != nil {
				t.Errorf("the history of %s term %d: %v", ns, term, err)
			} else if who != me {
				t.Errorf("the history of %s term %d names %v, want %v", ns, term, who, me)
			}
		}
	})
}

// TestTakeSeatsBesideAnotherTake: a take whose batch overlaps that of
// another take still open (a seat the other is granting, a namespace it is
// inserting) grants what neither holds without waiting for the other. Two
// takes at a cold start once deadlocked on PostgreSQL: one inserting a
// namespace the other had just granted waited for it, while the other
// waited for one of its inserts. On MariaDB, whose take holds its own
// transaction, the open take is its statements in a transaction.
func TestTakeSeatsBesideAnotherTake(t *testing.T) {
	eachTaker(t, func(t *testing.T, tk taker) {
		// In namespace order: a new one only the second take wants, a
		// free seat both want, a new one only the first wants.
		mine, both, theirs := tk.base+".a", tk.base+".b", tk.base+".c"
		tk.exec(t, "INSERT INTO election_leaders (namespace, term, updated_at) VALUES (?, 0, ?)", both, time.Now().UTC())
		first, err := tk.raw.BeginTx(tk.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = first.Rollback() }()
		if tk.name == "postgres" {
			taken, _, err := dialect.TakeSeats(tk.ctx, first, tk.d, uuid.New(), []string{both, theirs}, time.Minute, "host", 1, "", "expired")
			if err != nil || len(taken.Grants) != 2 {
				t.Fatalf("the first take: %d grants, %v; want 2", len(taken.Grants), err)
			}
		} else {
			id, hour := uuid.New(), time.Now().Add(time.Hour).UTC()
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{"UPDATE election_leaders SET leader_id = ?, term = 1, lease_expires_at = ?, acquired_at = ? WHERE namespace = ?", []any{id, hour, hour, both}},
				{"INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 1, ?, ?, ?)", []any{theirs, id, hour, hour, hour}},
			} {
				if _, err := first.ExecContext(tk.ctx, q.sql, q.args...); err != nil {
					t.Fatal(err)
				}
			}
		}

		taken, _, err := dialect.TakeSeats(tk.ctx, tk.lockTimeoutConn(t), tk.d, uuid.New(), []string{mine, both}, time.Minute, "host", 1, "", "expired")
		if err != nil {
			t.Fatalf("the second take waited for the first (a wait ends in a lock timeout): %v", err)
		}
		if len(taken.Held) != 0 {
			t.Errorf("the second take reported %+v held; the seats the first is granting are not held in its snapshot", taken.Held)
		}
		var got []string
		for _, g := range taken.Grants {
			got = append(got, g.Namespace)
		}
		if !slices.Equal(got, []string{mine}) {
			t.Errorf("the second take granted %q, want only %q", got, mine)
		}
	})
}

// TestTakeSeatsUnusualNamespaces: MariaDB's take carries its namespaces
// as a JSON text; namespaces that JSON escapes, and the longest allowed,
// are granted as they are, and a batch of the most namespaces one take
// carries fits.
func TestTakeSeatsUnusualNamespaces(t *testing.T) {
	eachTaker(t, func(t *testing.T, tk taker) {
		odd := []string{tk.base + `."quoted"\back`, tk.base + ".<&>\t\u00e9\U0001F600", tk.base + "." + strings.Repeat("\u00e9", (191-len(tk.base)-1)/2)}
		for _, ns := range odd {
			if len(ns) > 191 {
				t.Fatalf("namespace of %d bytes", len(ns))
			}
		}
		nss := slices.Clone(odd)
		for i := len(nss); i < min(dialect.SeatsPerTake(tk.d), 1024); i++ {
			nss = append(nss, fmt.Sprintf("%s.%04d", tk.base, i))
		}
		me := uuid.New()
		taken, _, err := dialect.TakeSeats(tk.ctx, tk.raw, tk.d, me, nss, time.Minute, "host", 1, "", "expired")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, g := range taken.Grants {
			got[g.Namespace] = true
		}
		if len(got) != len(nss) {
			t.Errorf("%d of %d namespaces granted", len(got), len(nss))
		}
		for _, ns := range odd {
			var leader uuid.UUID
			if err := tk.raw.QueryRowContext(tk.ctx, tk.bind("SELECT leader_id FROM election_leaders WHERE namespace = ?"), ns).Scan(&leader); err != nil || leader != me || !got[ns] {
				q, _ := json.Marshal(ns)
				t.Errorf("%s: leader %v (%v), granted %v; want %v", q, leader, err, got[ns], me)
			}
		}
	})
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// taker is a database whose dialect takes many seats in one statement.
type taker struct {
	name string
	db   *gorm.DB
	raw  *sql.DB
	ctx  context.Context
	base string // the test's namespace
	d    dialect.Dialect
}

// eachTaker runs fn on every configured server whose dialect takes many
// seats at once (PostgreSQL and MariaDB); it fails on one that should and
// does not.
func eachTaker(t *testing.T, fn func(t *testing.T, tk taker)) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			t.Cleanup(cancel)
			d, err := dialect.For(db)
			if err != nil {
				t.Fatal(err)
			}
			if d, err = dialect.Detect(ctx, db, d); err != nil {
				t.Fatal(err)
			}
			if !dialect.TakesSeatsAtOnce(d) {
				var version string
				if err := db.Raw("SELECT VERSION()").Row().Scan(&version); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(strings.ToLower(version), "mariadb") {
					t.Fatalf("MariaDB %s takes one seat at a time", version)
				}
				t.Skipf("%s takes one seat at a time", version)
			}
			fn(t, taker{name: tg.Name, db: db, raw: testdb.Raw(t, db), ctx: ctx, base: testdb.Namespace(t), d: d})
		})
	}
}

// exec runs q, with ? markers, on the test's database.
func (tk taker) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if err := tk.db.WithContext(tk.ctx).Exec(q, args...).Error; err != nil {
		t.Fatal(err)
	}
}

// bind turns q's ? markers into PostgreSQL's where needed.
func (tk taker) bind(q string) string {
	if tk.name != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lockTimeoutConn is a connection on which a wait for a row lock fails
// after 2 s.
func (tk taker) lockTimeoutConn(t *testing.T) *sql.Conn {
	t.Helper()
	conn, err := tk.raw.Conn(tk.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := "SET lock_timeout = '2s'"
	if tk.name != "postgres" {
		q = "SET SESSION innodb_lock_wait_timeout = 2"
	}
	if _, err := conn.ExecContext(tk.ctx, q); err != nil {
		t.Fatal(err)
	}
	return conn
}
