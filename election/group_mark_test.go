package election

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupTakesItsMarkOffSeatsItStops: on PostgreSQL a Group's renewals
// mark its seats as its member's (schema version 5), and such a seat has
// no free_at: the other Groups find its lapse through the member row. A
// Group that stops leading a seat while it lives on (here as an overload
// makes it: no statement, the lease left to lapse) takes the mark off in
// its next round, so that the seat's lease end is in free_at again, where
// the other Groups' rounds find it; the member row, still refreshed,
// would never lead them there.
func TestGroupTakesItsMarkOffSeatsItStops(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		if tg.Name != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ctx := electorCtx(t)
			ns := testdb.Namespace(t)
			started := make(chan Lease, 4)
			id := uuid.New()
			g, err := NewGroup(ctx, db, id, GroupConfig{
				Namespaces:       []string{ns},
				Interval:         200 * time.Millisecond,
				OnStartedLeading: func(_ context.Context, l Lease) { started <- l },
			}, WithLogger(silent), WithExpire(3*time.Second))
			if err != nil {
				t.Fatalf("NewGroup: %v", err)
			}
			runUntilCleanup(t, ctx, g)
			select {
			case <-started:
			case <-time.After(waitLimit):
				t.Fatal("the Group never led")
			}
			row := func() (member uuid.NullUUID, free sql.NullTime) {
				t.Helper()
				if err := db.WithContext(ctx).Raw("SELECT member_id, free_at FROM election_leaders WHERE namespace = ?", ns).Row().Scan(&member, &free); err != nil {
					t.Fatal(err)
				}
				return member, free
			}
			waitFor := func(what string, ok func(uuid.NullUUID, sql.NullTime) bool) {
				t.Helper()
				deadline := time.Now().Add(waitLimit)
				for {
					member, free := row()
					if ok(member, free) {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: the seat's row is marked %v, free_at %v", what, member, free)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			waitFor("renewed by the Group", func(m uuid.NullUUID, f sql.NullTime) bool { return m.Valid && m.UUID == id && !f.Valid })

			// It stops leading as carryLocked stops a seat in an overload,
			// and sits out long enough not to take it again meanwhile.
			g.box.lock()
			mem := g.members[ns]
			now := g.clk.Now()
			mem.m.stopLocked(whyOverloaded, now)
			mem.m.sitOutLocked(now, time.Minute, false)
			g.box.unlock()
			waitFor("after the Group stopped leading", func(m uuid.NullUUID, f sql.NullTime) bool { return !m.Valid && f.Valid })
		})
	}
}
