package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

var (
	alice = uuid.MustParse("00000000-0000-4000-8000-00000000000a")
	bob   = uuid.MustParse("00000000-0000-4000-8000-00000000000b")
)

// The whole protocol: two candidates register, one is elected, the other
// sees it lead, and when the leader unregisters the other takes over at
// once with the next term.
func Example() {
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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
	db, done := testdb.ExampleDB()
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

// countRounds is an Observer that counts rounds by outcome. Embedding
// NopObserver leaves the other methods empty.
type countRounds struct {
	election.NopObserver
	led, renewed chan struct{}
}

func (c *countRounds) Attempt(a election.Attempt) {
	switch a.Outcome {
	case election.OutcomeLed:
		select {
		case c.led <- struct{}{}:
		default:
		}
	case election.OutcomeRenewed:
		select {
		case c.renewed <- struct{}{}:
		default:
		}
	}
}

// An Observer sees every round of the Electors of an Election, without
// database calls of its own; here, the grant and a renewal. Its methods
// must return quickly.
func ExampleWithObserver() {
	db, done := testdb.ExampleDB()
	defer done()
	obs := &countRounds{led: make(chan struct{}, 1), renewed: make(chan struct{}, 1)}
	e, err := election.New(db, election.WithNamespace("observed"), election.WithExpire(3*time.Second), election.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	el, err := e.NewElector(alice, election.ElectorConfig{Interval: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- el.Run(ctx) }()
	<-obs.led
	fmt.Println("led")
	<-obs.renewed
	fmt.Println("renewed")
	stop()
	<-ran
	// Output:
	// led
	// renewed
}

// A HealthCheck serves a liveness probe: 200 while the Elector follows or
// leads and renews, 503 when it still acts as leader past its trust window.
func ExampleNewHealthCheck() {
	db, done := testdb.ExampleDB()
	defer done()
	e, err := election.New(db, election.WithNamespace("probed"))
	if err != nil {
		log.Fatal(err)
	}
	el, err := e.NewElector(alice, election.ElectorConfig{})
	if err != nil {
		log.Fatal(err)
	}
	hc, err := election.NewHealthCheck(el, 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", hc) // or: if err := hc.Check(nil); err != nil { ... }
	fmt.Println(hc.Name(), hc.Check(nil))
	// Output: sqlelect-probed <nil>
}

// ErrorClass gives an error's class, a small fixed set for metrics labels.
func ExampleErrorClass() {
	fmt.Println(election.ErrorClass(fmt.Errorf("election: Elect: %w", election.ErrConflict)))
	fmt.Println(election.ErrorClass(context.DeadlineExceeded))
	fmt.Println(election.ErrorClass(fmt.Errorf("election: Elect: %w", election.ErrReadOnly)))
	fmt.Println(election.ErrorClass(nil) == "")
	// Output:
	// conflict
	// timeout
	// read_only
	// true
}

// History lists the terms of a namespace, newest first, with their leader's
// identity and how each ended; VacateSeat is the operator's way to end a
// term.
func ExampleElection_History() {
	db, done := testdb.ExampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db, election.WithLabel("pod-7"))

	_, _ = e.Elect(ctx, alice)
	_ = e.Resign(ctx, alice)
	_, _ = e.Elect(ctx, bob)
	_, _ = e.VacateSeat(ctx) // an operator moves leadership on
	_, _ = e.Elect(ctx, alice)

	terms, _ := e.History(ctx, 10)
	for _, t := range terms {
		end := "running"
		if t.Ended() {
			end = string(t.EndReason)
		}
		fmt.Printf("term %d: %s, label %s, %s\n", t.Term, t.Leader.String()[34:], t.Identity.Label, end)
	}
	// Output:
	// term 3: 0a, label pod-7, running
	// term 2: 0b, label pod-7, vacated
	// term 1: 0a, label pod-7, resigned
}

// Candidates shows who the live candidates are; LeaderInfo who leads.
func ExampleElection_Candidates() {
	db, done := testdb.ExampleDB()
	defer done()
	ctx := context.Background()
	e, _ := election.New(db, election.WithLabel("v1.4.2"))

	_, _ = e.Elect(ctx, alice)
	_ = e.RegisterCandidate(ctx, bob)
	cands, _ := e.Candidates(ctx)
	for _, c := range cands {
		fmt.Printf("%s leader=%v label=%s pid-is-mine=%v\n", c.ID.String()[34:], c.Leader, c.Identity.Label, c.Identity.PID == os.Getpid())
	}
	info, _ := e.LeaderInfo(ctx)
	fmt.Println("leader's label:", info.Identity.Label)
	// Output:
	// 0a leader=true label=v1.4.2 pid-is-mine=true
	// 0b leader=false label=v1.4.2 pid-is-mine=true
	// leader's label: v1.4.2
}

// One candidate in many namespaces: a Group sends the same few statements
// per round whether it joins three namespaces or a thousand, and starts the
// leader work of each namespace it wins on a goroutine of its own.
func ExampleNewGroup() {
	db, done := testdb.ExampleDB()
	defer done()
	nss := []string{"tenant-a", "tenant-b", "tenant-c"}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	led := map[string]bool{}
	g, err := election.NewGroup(ctx, db, alice, election.GroupConfig{
		Namespaces: nss,
		OnStartedLeading: func(leaderCtx context.Context, lease election.Lease) {
			mu.Lock()
			led[lease.Namespace] = true
			if len(led) == len(nss) {
				cancel() // a real leader works until leaderCtx ends; here we shut down once all are led
			}
			mu.Unlock()
			<-leaderCtx.Done()
		},
	}, election.WithExpire(3*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("led:", len(led), "namespaces")
	for _, ns := range nss {
		e, _ := election.New(db, election.WithNamespace(ns))
		lease, _ := e.Leader(context.Background())
		fmt.Println(ns, "vacant after Run:", lease.Vacant())
	}
	// Output:
	// led: 3 namespaces
	// tenant-a vacant after Run: true
	// tenant-b vacant after Run: true
	// tenant-c vacant after Run: true
}
