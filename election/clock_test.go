package election_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

// TestDatabaseClock opens one database through handles whose application
// clock (GORM's NowFunc) is an hour ahead and an hour behind, and shows that
// the election plays out exactly as with an honest clock: expiry is judged by
// the database's clock alone, and every stored timestamp is the database's.
func TestDatabaseClock(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, honest := testdb.Shared(t, tg)
			skewed := func(d time.Duration) *gorm.DB {
				db, err := session.Open(dsn, &gorm.Config{NowFunc: func() time.Time { return time.Now().Add(d) }})
				if err != nil {
					t.Fatalf("session.Open: %v", err)
				}
				t.Cleanup(func() { testdb.Close(db) })
				return db
			}
			ahead, behind := skewed(time.Hour), skewed(-time.Hour)

			runs := []struct {
				name string
				a, b *gorm.DB
			}{
				{"honest", honest, honest},
				{"ahead-behind", ahead, behind},
				{"behind-ahead", behind, ahead},
			}
			var want []string
			for _, r := range runs {
				ns := testdb.Namespace(t) + "." + r.name
				got := clockScenario(t, r.a, r.b, ns)
				if want == nil {
					want = got
				} else if d := cmp.Diff(want, got); d != "" {
					t.Errorf("run %s differs from the honest run (-honest +%s):\n%s", r.name, r.name, d)
				}
				checkStoredTimes(t, honest, ns)
			}
			t.Logf("transcript: %q", want)
		})
	}
}

// clockScenario plays one election between a (through dbA) and b (through
// dbB) on ns, and returns what happened, in words that do not depend on the
// candidates' ids or the time.
func clockScenario(t *testing.T, dbA, dbB *gorm.DB, ns string) []string {
	ctx := testCtx(t)
	ea := mustElection(t, dbA, ns, election.WithExpire(shortExpire))
	eb := mustElection(t, dbB, ns, election.WithExpire(shortExpire))
	a, b := uuid.New(), uuid.New()
	name := func(id uuid.UUID) string {
		switch id {
		case a:
			return "a"
		case b:
			return "b"
		case uuid.Nil:
			return "nobody"
		}
		return id.String()
	}
	var out []string
	say := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	lease := func(what string, l election.Lease) {
		say("%s: %s leads term %d", what, name(l.Leader), l.Term)
		if l.Leader != uuid.Nil {
			say("%s: the lease lasts %v from the start of its term or its renewal", what, l.ExpiresAt.Sub(l.AcquiredAt) <= shortExpire)
		}
	}

	la := mustElect(t, ea, a)
	lease("a elects", la)
	lease("b elects", mustElect(t, eb, b))
	say("b sees a lead: %v", mustIsLeader(t, eb, a))
	say("b's Guard of a's lease: %v", eb.Guard(ctx, la) == nil)
	lease("a's Leader", mustLeader(t, ea))
	lease("b's Leader", mustLeader(t, eb))
	waitSeatVacant(t, ctx, eb)
	lease("a's Leader after expiry", mustLeader(t, ea))
	say("a still leads after expiry: %v", mustIsLeader(t, ea, a))
	lb := mustElect(t, eb, b)
	lease("b elects after expiry", lb)
	say("term 2 began after term 1 expired: %v", !lb.AcquiredAt.Before(la.ExpiresAt))
	lease("a elects", mustElect(t, ea, a))
	say("a's Guard of its old lease fails: %v", ea.Guard(ctx, la) != nil)
	must(t, "UnregisterCandidate(b)", eb.UnregisterCandidate(ctx, b))
	lease("a elects after b left", mustElect(t, ea, a))
	lease("b elects", mustElect(t, eb, b))
	return out
}

// checkStoredTimes checks that every timestamp stored for ns is within a
// few minutes of the database's clock, far from an hour off.
func checkStoredTimes(t *testing.T, db *gorm.DB, ns string) {
	t.Helper()
	now := dbNow(t, db)
	near := func(what string, ts time.Time) {
		t.Helper()
		if d := ts.Sub(now); d < -5*time.Minute || d > 5*time.Minute {
			t.Errorf("%s = %v is %v from the database clock %v", what, ts, d, now)
		}
	}
	row, ok := leaderRow(t, db, ns)
	if !ok {
		t.Fatalf("no leader row for %s", ns)
	}
	near("leader updated_at", row.UpdatedAt)
	if row.AcquiredAt == nil || row.LeaseExpiresAt == nil {
		t.Fatalf("leader row %+v has no lease", row)
	}
	near("leader acquired_at", *row.AcquiredAt)
	near("leader lease_expires_at", *row.LeaseExpiresAt)
	cands := candidateRows(t, db, ns)
	if len(cands) == 0 {
		t.Fatal("no candidate rows")
	}
	for id, c := range cands {
		near("registered_at of "+id.String(), c.RegisteredAt)
		near("last_heartbeat_at of "+id.String(), c.LastHeartbeatAt)
		near("expires_at of "+id.String(), c.ExpiresAt)
	}
}
