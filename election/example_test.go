package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// exampleDB opens a migrated SQLite database in a temporary directory; the
// returned function closes and removes it.
func exampleDB() (*gorm.DB, func()) {
	dir, err := os.MkdirTemp("", "sqlelect-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := session.Open("sqlite:" + filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	if err := migrate.Up(context.Background(), db); err != nil {
		log.Fatal(err)
	}
	return db, func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		os.RemoveAll(dir)
	}
}

var (
	alice = uuid.MustParse("00000000-0000-4000-8000-00000000000a")
	bob   = uuid.MustParse("00000000-0000-4000-8000-00000000000b")
)

// The whole protocol: two candidates register, one is elected, the other
// sees it lead, and when the leader unregisters the other takes over at
// once with the next term.
func Example() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()

	e, err := election.New(db, election.WithNamespace("scheduler"), election.WithExpire(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []uuid.UUID{alice, bob} {
		if err := e.RegisterCandidate(ctx, id); err != nil {
			log.Fatal(err)
		}
	}

	lease, _ := e.Elect(ctx, alice)
	fmt.Println("alice elects:", lease.Leader == alice, "term", lease.Term)
	lease, _ = e.Elect(ctx, bob)
	fmt.Println("bob elects, alice still leads:", lease.Leader == alice, "term", lease.Term)

	_ = e.UnregisterCandidate(ctx, alice) // graceful shutdown vacates the seat
	lease, _ = e.Elect(ctx, bob)
	fmt.Println("bob takes over:", lease.Leader == bob, "term", lease.Term)
	// Output:
	// alice elects: true term 1
	// bob elects, alice still leads: true term 1
	// bob takes over: true term 2
}

// Elect returns the lease after the call: the caller's when it won or
// renewed, another candidate's when that one holds a live lease.
func ExampleElection_Elect() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db)

	first, _ := e.Elect(ctx, alice)
	renewed, _ := e.Elect(ctx, alice)
	other, _ := e.Elect(ctx, bob)

	fmt.Println("leader:", first.HeldBy(alice), "term", first.Term)
	fmt.Println("renewal keeps the term:", renewed.Term == first.Term, "and extends the lease:", !renewed.ExpiresAt.Before(first.ExpiresAt))
	fmt.Println("no preemption:", other.HeldBy(alice))
	// Output:
	// leader: true term 1
	// renewal keeps the term: true and extends the lease: true
	// no preemption: true
}

// IsLeader asks the database, by its clock, whether a candidate holds an
// unexpired lease.
func ExampleElection_IsLeader() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db)

	_, _ = e.Elect(ctx, alice)
	a, _ := e.IsLeader(ctx, alice)
	b, _ := e.IsLeader(ctx, bob)
	fmt.Println(a, b)
	// Output: true false
}

// ListCandidates lists the live candidates in a stable order.
func ExampleElection_ListCandidates() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db)

	_ = e.RegisterCandidate(ctx, bob)
	_ = e.Heartbeat(ctx, alice) // Heartbeat creates a missing row too
	ids, _ := e.ListCandidates(ctx)
	for _, id := range ids {
		fmt.Println(id)
	}
	// Output:
	// 00000000-0000-4000-8000-00000000000a
	// 00000000-0000-4000-8000-00000000000b
}

// Guard fences leader-only writes: inside the transaction that does the
// work, it checks that the lease is still held with the same term and locks
// the seat until the transaction ends. A leader that lost the seat gets
// ErrNotLeader and its transaction writes nothing.
func ExampleElection_Guard() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db)
	_ = db.Exec("CREATE TABLE jobs (name TEXT, term INTEGER)").Error

	lease, _ := e.Elect(ctx, alice)
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := e.Guard(ctx, lease, election.WithTx(tx)); err != nil {
			return err
		}
		return tx.Exec("INSERT INTO jobs (name, term) VALUES (?, ?)", "nightly-report", lease.Term).Error
	})
	fmt.Println("write as leader:", err)

	_ = e.Resign(ctx, alice) // alice gives up the seat; bob is elected
	_, _ = e.Elect(ctx, bob)
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := e.Guard(ctx, lease, election.WithTx(tx)); err != nil {
			return err
		}
		return tx.Exec("INSERT INTO jobs (name, term) VALUES (?, ?)", "stale", lease.Term).Error
	})
	fmt.Println("write with a stale lease is refused:", errors.Is(err, election.ErrNotLeader))

	var n int64
	db.Raw("SELECT COUNT(*) FROM jobs").Scan(&n)
	fmt.Println("rows written:", n)
	// Output:
	// write as leader: <nil>
	// write with a stale lease is refused: true
	// rows written: 1
}

// WithTx runs a call inside the caller's transaction: its writes commit or
// vanish with the caller's, and the library never commits or rolls back.
func ExampleWithTx() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db)

	tx := db.Begin()
	_, _ = e.Elect(ctx, alice, election.WithTx(tx))
	tx.Rollback() // the election rolls back with the caller's transaction

	lease, _ := e.Leader(ctx)
	fmt.Println("vacant after rollback:", lease.Vacant())
	// Output: vacant after rollback: true
}

// UnregisterCandidate on shutdown hands the seat over at once instead of
// after the lease expires.
func ExampleElection_UnregisterCandidate() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db, election.WithExpire(time.Hour))

	_, _ = e.Elect(ctx, alice)
	_ = e.UnregisterCandidate(ctx, alice)
	lease, _ := e.Leader(ctx)
	fmt.Println("vacant:", lease.Vacant())
	next, _ := e.Elect(ctx, bob)
	fmt.Println("bob leads in term", next.Term)
	// Output:
	// vacant: true
	// bob leads in term 2
}

// An Elector runs the election loop: it calls OnStartedLeading with a
// context that ends when leadership does, and on shutdown unregisters so
// that another candidate can take over at once.
func ExampleElector() {
	db, done := exampleDB()
	defer done()
	e, _ := election.New(db, election.WithNamespace("reports"), election.WithExpire(3*time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	el, err := e.NewElector(alice, election.ElectorConfig{
		OnStartedLeading: func(leaderCtx context.Context, lease election.Lease) {
			fmt.Println("leading in term", lease.Term)
			cancel() // a real leader works until leaderCtx ends; here we shut down at once
			<-leaderCtx.Done()
		},
		OnStoppedLeading: func(lease election.Lease) { fmt.Println("stopped leading term", lease.Term) },
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := el.Run(ctx); err != nil {
		log.Fatal(err)
	}
	lease, _ := e.Leader(context.Background())
	fmt.Println("seat vacant after Run:", lease.Vacant())
	// Output:
	// leading in term 1
	// stopped leading term 1
	// seat vacant after Run: true
}
