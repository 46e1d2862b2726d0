package election

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestStaleTermChangesNothing: a resignation guarded by a term vacates that
// term only. Candidate a leads in term 1, resigns and wins again in term 2;
// a resignation guarded by term 1 then leaves a's term 2 in place, and one
// guarded by term 2 vacates it. (The Elector resigns this way, with the
// term it leads in.)
func TestStaleTermChangesNothing(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			e := newTestElection(t, db, ns, waitLimit)
			ctx := context.Background()
			a := uuid.New()
			l1, err := e.Elect(ctx, a)
			if err != nil || !l1.HeldBy(a) {
				t.Fatalf("first Elect: %+v, %v", l1, err)
			}
			if err := e.Resign(ctx, a); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			l2, err := e.Elect(ctx, a)
			if err != nil || !l2.HeldBy(a) || l2.Term != l1.Term+1 {
				t.Fatalf("Elect after Resign: %+v, %v; want %s in term %d", l2, err, a, l1.Term+1)
			}

			if err := e.vacate(ctx, "Resign", a, l1.Term, false, nil); err != nil {
				t.Fatalf("resigning term %d: %v", l1.Term, err)
			}
			if got, err := e.Leader(ctx); err != nil || got.Leader != a || got.Term != l2.Term || !got.ExpiresAt.Equal(l2.ExpiresAt) {
				t.Fatalf("after resigning the stale term %d: Leader = %+v, %v; want %+v unchanged", l1.Term, got, err, l2)
			}
			if err := e.Guard(ctx, l2); err != nil {
				t.Fatalf("after resigning the stale term %d: Guard(term %d) = %v", l1.Term, l2.Term, err)
			}

			if err := e.vacate(ctx, "Resign", a, l2.Term, false, nil); err != nil {
				t.Fatalf("resigning term %d: %v", l2.Term, err)
			}
			if got, err := e.Leader(ctx); err != nil || got.Leader != uuid.Nil {
				t.Fatalf("after resigning term %d: Leader = %+v, %v; want vacant", l2.Term, got, err)
			}
			if ids, err := e.ListCandidates(ctx); err != nil || len(ids) != 1 || ids[0] != a {
				t.Fatalf("candidates after resigning: %v, %v; want %s still a candidate", ids, err, a)
			}
		})
	}
}
