package election

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/pace"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// BenchmarkGroupRoundFollowing measures one round of a Group that follows
// in every namespace it joined: another candidate holds every seat for an
// hour, so the round renews nothing and reads no seat, and what it costs
// beyond its statement (the member row's refresh and an empty range) is
// the process's own work. It runs on SQLite, whose statement costs the
// same whatever the namespaces; ns/op is per round.
//
//	go test -run '^$' -bench GroupRoundFollowing -benchmem ./election/
func BenchmarkGroupRoundFollowing(b *testing.B) {
	benchFollowing(b, false)
}

// BenchmarkGroupRoundFollowingInAGap is BenchmarkGroupRoundFollowing in an
// overload that lasts: the seats kept bounded and the attempts shed before
// every round, and no range of seats read for longer than an expiry
// window, so every seat not led is owed a reading by key (fullRound). The
// rounds within a window of the marking walk only the seats they concern.
//
//	go test -run '^$' -bench GroupRoundFollowing -benchmem ./election/
func BenchmarkGroupRoundFollowingInAGap(b *testing.B) {
	benchFollowing(b, true)
}

// benchFollowing runs the two benchmarks above: gapped, in an overload
// whose rounds read no range.
func benchFollowing(b *testing.B, gapped bool) {
	db := testdb.Open(b, testdb.Only(b, "sqlite"))
	ctx := context.Background()
	for _, n := range []int{500, 5000} { // a Group takes at most 5,461 on SQLite
		names := heldByAnother(b, ctx, db, fmt.Sprintf("bench.follow.%s.%d.", uuid.NewString()[:8], n), n)
		g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: names}, WithLogger(silent))
		if err != nil {
			b.Fatal(err)
		}
		// The first rounds write the candidate rows and read every
		// seat once, in steps.
		for range 64 {
			if err := g.fullRound(ctx, causeTick); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("namespaces=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			if gapped {
				g.box.lock()
				g.ranged = time.Now().Add(-2 * g.base.expire)
				g.box.unlock()
			}
			b.ResetTimer()
			for range b.N {
				if gapped {
					g.box.lock()
					g.pace.Heavy(pace.Max-1, time.Second, time.Second)
					g.pace.Round(true)
					g.box.unlock()
				}
				if err := g.fullRound(ctx, causeTick); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if led := len(g.Leading()); led != 0 {
				b.Fatalf("the follower leads %d namespaces", led)
			}
		})
	}
}

// heldByAnother writes n seats on SQLite, prefix followed by six digits,
// each led by the same other candidate for an hour, and returns their
// namespaces.
func heldByAnother(tb testing.TB, ctx context.Context, db *gorm.DB, prefix string, n int) []string {
	tb.Helper()
	if err := db.WithContext(ctx).Exec("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "+
		"INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
		"SELECT ? || printf('%06d', i), ?, 1, strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour') || '000', "+
		"strftime('%Y-%m-%d %H:%M:%f', 'now') || '000', strftime('%Y-%m-%d %H:%M:%f', 'now') || '000' FROM s",
		n, prefix, uuid.NewString()).Error; err != nil {
		tb.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%06d", prefix, i+1)
	}
	return names
}
