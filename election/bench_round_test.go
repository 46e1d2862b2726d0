package election

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

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
	db := testdb.Open(b, testdb.Only(b, "sqlite"))
	ctx := context.Background()
	for _, n := range []int{500, 5000} { // a Group takes at most 5,461 on SQLite
		prefix := fmt.Sprintf("bench.follow.%s.%d.", uuid.NewString()[:8], n)
		if err := db.WithContext(ctx).Exec("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "+
			"INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
			"SELECT ? || printf('%06d', i), ?, 1, strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour') || '000', "+
			"strftime('%Y-%m-%d %H:%M:%f', 'now') || '000', strftime('%Y-%m-%d %H:%M:%f', 'now') || '000' FROM s",
			n, prefix, uuid.NewString()).Error; err != nil {
			b.Fatal(err)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s%06d", prefix, i+1)
		}
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
			b.ResetTimer()
			for range b.N {
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
