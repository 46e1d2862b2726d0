package dialect_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupRoundMarksSeats: on PostgreSQL (schema version 5) a Group's
// round marks the seats it renews as its member's, after which their
// renewals are heap-only updates (no index entry written); a round with
// Release takes the mark off the seats it no longer renews, which then
// have a free_at again; another Group's round finds a marked seat through
// its member row once that row is about to lapse, and not before; and a
// member row deleted, whether by the Group (MemberGone) or by a prune
// (PruneMember), takes its marks with it.
func TestGroupRoundMarksSeats(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		if tg.Name != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			raw, ctx, d := roundOn(t, tg)
			base := testdb.Namespace(t)
			mine, lapsing, lasting := base+".mine", base+".lapsing", base+".lasting"
			me, fading, staying := uuid.New(), uuid.New(), uuid.New()
			exec := func(q string, args ...any) {
				t.Helper()
				if _, err := raw.ExecContext(ctx, d.Rebind(q), args...); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			now := time.Now()
			// Two other Groups, each leading one seat it marked: one whose
			// member row ends within the horizon, one whose row lasts.
			for _, o := range []struct {
				ns     string
				member uuid.UUID
				ends   time.Time
			}{{lapsing, fading, now.Add(500 * time.Millisecond)}, {lasting, staying, now.Add(time.Hour)}} {
				exec("INSERT INTO election_members (member_id, registered_at, last_heartbeat_at, expires_at) VALUES (?, ?, ?, ?)",
					o.member, d.TimeArg(now), d.TimeArg(now), d.TimeArg(o.ends))
				exec("INSERT INTO election_leaders (namespace, leader_id, member_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, ?, 3, ?, ?, ?)",
					o.ns, o.member, o.member, d.TimeArg(o.ends), d.TimeArg(now), d.TimeArg(now))
			}
			exec("INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 5, ?, ?, ?)",
				mine, me, d.TimeArg(now.Add(time.Minute)), d.TimeArg(now), d.TimeArg(now))

			tx, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			in := dialect.RoundIn{Member: me, Hostname: "host", PID: 1, Expire: time.Minute, Horizon: time.Second, Lapsed: time.Second,
				Joined: 3, Join: []string{mine, lapsing, lasting}, Held: []dialect.HeldLease{{Namespace: mine, Term: 5}}, Read: []string{mine}}
			out, err := dialect.GroupRound(ctx, tx, d, in)
			if err != nil {
				t.Fatalf("GroupRound: %v", err)
			}
			if _, ok := out.Renewed[mine]; !ok {
				t.Fatalf("renewed %v, want %s", out.Renewed, mine)
			}
			read := map[string]bool{}
			for _, s := range out.Seats {
				read[s.Namespace] = true
			}
			if !read[lapsing] || read[lasting] {
				t.Errorf("read %v: want %s (its member row ends within the horizon) and not %s (its member row lasts)", read, lapsing, lasting)
			}
			marked := func(ns string) (member uuid.NullUUID, free sql.NullTime) {
				t.Helper()
				if err := tx.QueryRowContext(ctx, "SELECT member_id, free_at FROM election_leaders WHERE namespace = $1", ns).Scan(&member, &free); err != nil {
					t.Fatal(err)
				}
				return member, free
			}
			if member, free := marked(mine); member.UUID != me || free.Valid {
				t.Errorf("%s after a renewal: marked %v, free_at %v; want marked %v, no free_at", mine, member, free, me)
			}

			// The renewals of a marked seat change no indexed column: each
			// is a heap-only update (counted for this transaction alone).
			counts := func() (updated, hot int64) {
				t.Helper()
				if err := tx.QueryRowContext(ctx, "SELECT pg_stat_get_xact_tuples_updated(CAST('election_leaders' AS regclass)), "+
					"pg_stat_get_xact_tuples_hot_updated(CAST('election_leaders' AS regclass))").Scan(&updated, &hot); err != nil {
					t.Fatal(err)
				}
				return updated, hot
			}
			in.Join = nil
			updated0, hot0 := counts()
			for range 3 {
				if out, err = dialect.GroupRound(ctx, tx, d, in); err != nil {
					t.Fatalf("GroupRound: %v", err)
				} else if _, ok := out.Renewed[mine]; !ok {
					t.Fatalf("renewed %v, want %s", out.Renewed, mine)
				}
			}
			if updated, hot := counts(); updated-updated0 != 3 || hot-hot0 != 3 {
				t.Errorf("3 renewals of a marked seat: %d updates, %d of them heap-only; want 3 of 3", updated-updated0, hot-hot0)
			}

			// A round that no longer renews it, with Release, takes the
			// mark off: the seat's lease end is in free_at again.
			in.Held, in.Release = nil, true
			if _, err := dialect.GroupRound(ctx, tx, d, in); err != nil {
				t.Fatalf("GroupRound with Release: %v", err)
			}
			if member, free := marked(mine); member.Valid || !free.Valid {
				t.Errorf("%s after Release: marked %v, free_at %v; want no mark, a free_at", mine, member, free)
			}
			if member, _ := marked(lasting); member.UUID != staying {
				t.Errorf("%s after another member's Release: marked %v, want %v", lasting, member, staying)
			}

			// A member row deleted takes its marks with it.
			if _, err := tx.ExecContext(ctx, dialect.MemberGone(d), staying); err != nil {
				t.Fatalf("MemberGone: %v", err)
			}
			if member, free := marked(lasting); member.Valid || !free.Valid {
				t.Errorf("%s after MemberGone: marked %v, free_at %v; want no mark, a free_at", lasting, member, free)
			}
			if _, err := tx.ExecContext(ctx, dialect.PruneMember(d), fading, d.DurationArg(time.Hour)); err != nil {
				t.Fatalf("PruneMember: %v", err)
			}
			if member, free := marked(lapsing); member.Valid || !free.Valid {
				t.Errorf("%s after PruneMember: marked %v, free_at %v; want no mark, a free_at", lapsing, member, free)
			}
			var members int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_members WHERE member_id IN ($1, $2)", fading, staying).Scan(&members); err != nil || members != 0 {
				t.Errorf("%d member rows left (%v), want both deleted", members, err)
			}
		})
	}
}
