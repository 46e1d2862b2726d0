package dialect_test

import (
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// TestVacateSeats: on PostgreSQL and MariaDB, VacateSeats over a seat the
// candidate holds, a seat another holds and a namespace without a seat
// clears the first, ends its term as unregistered, leaves the other seat
// as it is, and deletes the candidate's rows in all three.
func TestVacateSeats(t *testing.T) {
	eachTaker(t, func(t *testing.T, tk taker) {
		mine, theirs, none := tk.base+".mine", tk.base+".theirs", tk.base+".none"
		me, other := uuid.New(), uuid.New()
		hour, now := time.Now().Add(time.Hour).UTC(), time.Now().UTC()
		tk.exec(t, "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 3, ?, ?, ?), (?, ?, 5, ?, ?, ?)",
			mine, me, hour, now, now, theirs, other, hour, now, now)
		tk.exec(t, "INSERT INTO election_history (namespace, term, leader_id, hostname, pid, label, acquired_at) VALUES (?, 3, ?, 'h', 1, '', ?), (?, 5, ?, 'h', 1, '', ?)",
			mine, me, now, theirs, other, now)
		for _, ns := range []string{mine, theirs, none} {
			tk.exec(t, "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at, hostname, pid, label) VALUES (?, ?, ?, ?, ?, 'h', 1, '')",
				ns, me, now, now, hour)
		}
		nss := []string{theirs, none, mine}
		vacated, moved, ok, err := dialect.VacateSeats(tk.ctx, tk.raw, tk.d, dialect.SeatsVacate{ID: me, Namespaces: nss,
			Payloads: []string{"p1", "p2", "p3"}, Reason: "unregistered", Channel: "sqlelect_test_vacate_seats", Pool: tk.raw})
		if err != nil || !ok {
			t.Fatalf("VacateSeats: ok %v, err %v", ok, err)
		}
		if !slices.Equal(vacated, []string{mine}) || len(moved) != 0 {
			t.Errorf("vacated %q, moved %q; want %q, none", vacated, moved, mine)
		}
		for _, c := range []struct {
			ns     string
			leader uuid.NullUUID
			term   int64
		}{{mine, uuid.NullUUID{}, 3}, {theirs, uuid.NullUUID{UUID: other, Valid: true}, 5}} {
			var leader uuid.NullUUID
			var term int64
			if err := tk.raw.QueryRowContext(tk.ctx, tk.bind("SELECT leader_id, term FROM election_leaders WHERE namespace = ?"), c.ns).Scan(&leader, &term); err != nil {
				t.Fatal(err)
			}
			if leader != c.leader || term != c.term {
				t.Errorf("%s: leader %v in term %d, want %v in term %d", c.ns, leader, term, c.leader, c.term)
			}
		}
		for _, c := range []struct {
			ns, reason string
		}{{mine, "unregistered"}, {theirs, ""}} {
			var reason sql.NullString
			if err := tk.raw.QueryRowContext(tk.ctx, tk.bind("SELECT end_reason FROM election_history WHERE namespace = ?"), c.ns).Scan(&reason); err != nil {
				t.Fatal(err)
			}
			if reason.String != c.reason {
				t.Errorf("%s: the term's end reason is %q, want %q", c.ns, reason.String, c.reason)
			}
		}
		var rows int
		if err := tk.db.WithContext(tk.ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE candidate_id = ?", me).Row().Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 0 {
			t.Errorf("%d candidate rows left, want 0", rows)
		}
	})
}
