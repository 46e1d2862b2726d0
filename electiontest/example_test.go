package electiontest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// An integration test of your own: two candidates compete, every lease
// they see is recorded, the leader does its leader-only work through a
// Fence, and at the end the history is checked. In a real test run the
// candidates concurrently, for longer, with faults (killed processes,
// paused leaders, cut connections), and fail the test on res.Err().
func Example() {
	db, closeDB := testdb.ExampleDB()
	defer closeDB()
	ctx := context.Background()
	e, err := election.New(db, election.WithNamespace("reports"), election.WithExpire(time.Minute))
	if err != nil {
		log.Fatal(err)
	}

	rec := electiontest.NewRecorder()
	fence, err := electiontest.NewFence(ctx, db, e, rec)
	if err != nil {
		log.Fatal(err)
	}
	candidates := map[string]uuid.UUID{"alice": uuid.New(), "bob": uuid.New()}
	for round := 0; round < 3; round++ {
		for _, name := range []string{"alice", "bob"} {
			id := candidates[name]
			lease, err := e.Elect(ctx, id)
			if err != nil {
				log.Fatal(err)
			}
			rec.Observe(name, lease)
			if lease.HeldBy(id) {
				// Leader-only work: Guard and the write in one transaction.
				if _, err := fence.Write(ctx, lease); err != nil && !errors.Is(err, election.ErrNotLeader) {
					log.Fatal(err)
				}
			}
		}
	}
	// Alice hands over; Bob takes the next term.
	lease, _ := e.Leader(ctx)
	rec.Released(lease)
	if err := e.Resign(ctx, candidates["alice"]); err != nil {
		log.Fatal(err)
	}
	next, err := e.Elect(ctx, candidates["bob"])
	if err != nil {
		log.Fatal(err)
	}
	rec.Observe("bob", next)
	if _, err := fence.Write(ctx, next); err != nil {
		log.Fatal(err)
	}

	// The database's own record of the writes, then the check.
	if err := fence.Load(ctx); err != nil {
		log.Fatal(err)
	}
	res := rec.Check()
	fmt.Println(res)
	fmt.Println("error:", res.Err())
	// Output:
	// 1 namespaces, 2 terms, 7 observations, 4 fenced writes: no violations
	// error: <nil>
}

// A Group's leaderships, recorded with no code in its callbacks: the
// Observer records every lease the Group was granted or renewed, and the
// terms it gave up (here at shutdown), even those whose leader work never
// ran.
func ExampleObserver() {
	db, closeDB := testdb.ExampleDB()
	defer closeDB()
	ctx := context.Background()

	rec := electiontest.NewRecorder()
	g, err := election.NewGroup(ctx, db, uuid.New(), election.GroupConfig{
		Namespaces: []string{"billing", "reports"},
		Interval:   100 * time.Millisecond,
	}, election.WithObserver(electiontest.NewObserver(rec, "group-1")))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	for len(g.Leading()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	stop() // shutdown vacates both terms
	if err := <-done; err != nil {
		log.Fatal(err)
	}

	for _, term := range rec.History().Terms {
		fmt.Printf("%s term %d released: %v\n", term.Namespace, term.Term, term.Released)
	}
	fmt.Println("error:", rec.Check().Err())
	// Output:
	// billing term 1 released: true
	// reports term 1 released: true
	// error: <nil>
}
