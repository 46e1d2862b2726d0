package election

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupBatchTakeLearnsTheHolders: a batch take over free seats and
// seats another candidate took since the Group read them grants the free
// one and, on PostgreSQL, leaves the Group knowing who holds the others,
// as a reading would: their seats rest (a round neither walks nor reads
// them by key) until the holder's lease nears its end. Before, the Group
// knew only that it missed them, and read them again in every round
// until a reading showed the holder: at a cold start, thousands a round.
func TestGroupBatchTakeLearnsTheHolders(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "postgres" {
			continue // the only database whose take reports the seats it found held
		}
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.OpenDSN(t, tg.DSN)
			ctx := electorCtx(t)
			free, held := testdb.Namespace(t), testdb.Namespace(t)
			other := uuid.New()
			hour := time.Now().Add(time.Hour).UTC()
			if err := db.WithContext(ctx).Exec("INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES (?, ?, 3, ?, ?, ?)",
				held, other, hour, hour, hour).Error; err != nil {
				t.Fatal(err)
			}
			g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: []string{free, held}}, WithLogger(silent))
			if err != nil {
				t.Fatal(err)
			}
			if !dialect.TakesSeatsAtOnce(g.base.d) {
				t.Fatal("PostgreSQL takes seats in batches")
			}
			g.box.lock()
			mems := []*member{g.members[free], g.members[held]}
			for _, mem := range mems {
				mem.written = true // as a round would have: the seats may be tried
				g.beginAttemptLocked(mem)
			}
			g.box.unlock()
			g.takeSeats(ctx, mems, causeTick)

			g.box.lock()
			defer g.box.unlock()
			if mem := g.members[free]; mem.m.cur == nil {
				t.Errorf("the free seat %s was not granted", free)
			}
			mem := g.members[held]
			switch l := mem.m.last; {
			case mem.m.cur != nil:
				t.Fatalf("the seat %s held by another was granted", held)
			case !mem.seen || l.Leader != other || l.Term != 3 || l.ExpiresAt.Sub(hour).Abs() > time.Millisecond:
				t.Errorf("after the take, %s is seen %v as %+v; want held by %v in term 3 until %v", held, mem.seen, l, other, hour)
			case !g.restsLocked(mem):
				t.Errorf("the seat %s held by another does not rest after the take (reread %v): rounds would read it again", held, mem.reread)
			}
			if ends, _, ok := g.members[held].m.e.seatEnds(other); !ok || time.Until(ends) < 59*time.Minute {
				t.Errorf("the seat's reading ends at %v (%v); want about an hour from now", ends, ok)
			}
		})
	}
}
