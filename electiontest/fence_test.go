package electiontest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

func newElection(t *testing.T, db *gorm.DB, expire time.Duration) *election.Election {
	t.Helper()
	e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)), election.WithExpire(expire))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A leader whose lease has passed to another candidate cannot write through
// the fence; the writes that did commit check clean.
func TestFenceStopsStaleLeader(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := ctxFor(t)
		e := newElection(t, db, 300*time.Millisecond)
		rec := electiontest.NewRecorder()
		fence, err := electiontest.NewFence(ctx, db, e, rec)
		if err != nil {
			t.Fatal(err)
		}
		la, err := e.Elect(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		rec.Observe("a", la)
		if !la.HeldBy(a) {
			t.Fatalf("a did not win a vacant seat: %+v", la)
		}
		for i := 0; i < 3; i++ {
			if _, err := fence.Write(ctx, la); err != nil {
				t.Fatal(err)
			}
		}
		// b takes over once a's lease has expired.
		var lb election.Lease
		deadline := time.Now().Add(20 * time.Second)
		for !lb.HeldBy(b) {
			if time.Now().After(deadline) {
				t.Fatal("b never took over the expired lease")
			}
			time.Sleep(20 * time.Millisecond)
			if lb, err = e.Elect(ctx, b); err != nil {
				t.Fatal(err)
			}
			rec.Observe("b", lb)
		}
		if _, err := fence.Write(ctx, la); !errors.Is(err, election.ErrNotLeader) {
			t.Fatalf("stale leader's write: %v, want ErrNotLeader", err)
		}
		w, err := fence.Write(ctx, lb)
		if err != nil {
			t.Fatal(err)
		}
		if w.Counter != 4 || w.Term != lb.Term || w.Leader != b {
			t.Fatalf("new leader's write = %+v", w)
		}
		if err := fence.Load(ctx); err != nil {
			t.Fatal(err)
		}
		res := rec.Check()
		if err := res.Err(); err != nil {
			t.Fatal(err)
		}
		if res.Writes != 4 || res.Terms != 2 {
			t.Fatalf("%v: want 4 writes in 2 terms", res)
		}
	})
}

// The negative control: a leader that writes without Guard after losing
// its lease commits a stale write, and the check reports it.
func TestUnguardedStaleLeaderIsCaught(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := ctxFor(t)
		e := newElection(t, db, 200*time.Millisecond)
		rec := electiontest.NewRecorder()
		fence, err := electiontest.NewFence(ctx, db, e, rec)
		if err != nil {
			t.Fatal(err)
		}
		la, err := e.Elect(ctx, a)
		if err != nil || !la.HeldBy(a) {
			t.Fatalf("Elect: %+v, %v", la, err)
		}
		rec.Observe("a", la)
		var lb election.Lease
		for deadline := time.Now().Add(20 * time.Second); !lb.HeldBy(b); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("b never took over")
			}
			if lb, err = e.Elect(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		rec.Observe("b", lb)
		if _, err := fence.Write(ctx, lb); err != nil {
			t.Fatal(err)
		}
		// a wakes up and, trusting itself, writes with its old term.
		if _, err := fence.WriteUnguarded(ctx, la); err != nil {
			t.Fatal(err)
		}
		res := rec.Check()
		if res.Count(electiontest.StaleWrite) != 1 || !errors.Is(res.Err(), electiontest.ErrViolation) {
			t.Fatalf("%v, want 1 stale write", res)
		}
	})
}

// A write of an old term that got into the table anyway (here by hand, as
// an application without the fence could) is caught from the database's
// own rows.
func TestFenceCatchesStaleRowFromDatabase(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := ctxFor(t)
		e := newElection(t, db, time.Minute)
		rec := electiontest.NewRecorder()
		fence, err := electiontest.NewFence(ctx, db, e, rec)
		if err != nil {
			t.Fatal(err)
		}
		la, err := e.Elect(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		rec.Observe("a", la)
		if _, err := fence.Write(ctx, la); err != nil {
			t.Fatal(err)
		}
		// Rows of a term 2 write followed by a term 1 write, as a broken
		// fence would leave them.
		ws, err := fence.Writes(ctx)
		if err != nil || len(ws) != 1 {
			t.Fatalf("Writes = %v, %v", ws, err)
		}
		key := rawKey(e)
		for _, row := range []struct {
			counter, term int64
			id            uuid.UUID
		}{{2, la.Term + 1, b}, {3, la.Term, a}} {
			if err := db.Exec("INSERT INTO "+electiontest.FenceTable+" (namespace_key, counter, term, leader_id) VALUES (?, ?, ?, ?)",
				key, row.counter, row.term, row.id.String()).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := fence.Load(ctx); err != nil {
			t.Fatal(err)
		}
		res := rec.Check()
		if res.Count(electiontest.StaleWrite) != 1 || res.Writes != 3 {
			t.Fatalf("%v, want 1 stale write out of 3", res)
		}
		if err := fence.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if ws, err := fence.Writes(ctx); err != nil || len(ws) != 0 {
			t.Fatalf("after Reset: %v, %v", ws, err)
		}
	})
}

// rawKey is the key the fence stores e's namespace under.
func rawKey(e *election.Election) string {
	sum := sha256.Sum256([]byte(e.Namespace()))
	return hex.EncodeToString(sum[:])
}

// Several candidates race to elect and write with a short lease; the
// checker finds nothing wrong and every write it saw committed.
func TestFenceUnderContention(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := ctxFor(t)
		e := newElection(t, db, 150*time.Millisecond)
		rec := electiontest.NewRecorder()
		fence, err := electiontest.NewFence(ctx, db, e, rec)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := uuid.New()
				name := fmt.Sprint("p", i)
				for round := 0; round < 25; round++ {
					l, err := e.Elect(ctx, id)
					if err != nil {
						t.Error(err)
						return
					}
					rec.Observe(name, l)
					if l.HeldBy(id) {
						if _, err := fence.Write(ctx, l); err != nil && !errors.Is(err, election.ErrNotLeader) {
							t.Error(err)
							return
						}
						if round%5 == 4 {
							// Let the lease lapse now and then so terms change.
							time.Sleep(170 * time.Millisecond)
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		if err := fence.Load(ctx); err != nil {
			t.Fatal(err)
		}
		res := rec.Check()
		if err := res.Err(); err != nil {
			t.Fatal(err)
		}
		if res.Writes == 0 {
			t.Fatal("no fenced writes")
		}
		t.Log(res)
	})
}
