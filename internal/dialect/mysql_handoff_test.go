package dialect_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// handoffHelperEnv, when set, makes TestMySQLHandoffHelper act as the
// leader's process: it names the namespace.
const handoffHelperEnv = "SQLELECT_MYSQL_HANDOFF_HELPER"

// handoffChannel is internal/handoff's channel for tables on the search
// path.
const handoffChannel = "sqlelect_handoff"

// TestMySQLHandoffHelper is the leader's process of
// TestMySQLHandoffAcrossProcesses; it does nothing in a test run of its own.
func TestMySQLHandoffHelper(t *testing.T) {
	ns := os.Getenv(handoffHelperEnv)
	if ns == "" {
		t.Skip("runs only as the leader's process of TestMySQLHandoffAcrossProcesses")
	}
	ctx := context.Background()
	db := testdb.OpenDSN(t, os.Getenv(testdb.MySQLEnv))
	e, err := election.New(db, election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	l, err := e.Elect(ctx, id)
	if err != nil || !l.HeldBy(id) {
		t.Fatalf("Elect: %+v, %v", l, err)
	}
	fmt.Println("leading")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		t.Fatal("no word to vacate")
	}
	if err := e.UnregisterCandidate(ctx, id); err != nil {
		t.Fatal(err)
	}
	fmt.Println("vacated")
}

// freshMySQL returns the DSN of a new, migrated database on the MySQL
// target: its listeners' names are its own, so that only this test's
// listeners wait on them.
func freshMySQL(t *testing.T) string {
	t.Helper()
	tg := mysqlTarget(t)
	dsn := testdb.Fresh(t, tg)
	testdb.Open(t, testdb.Target{Name: tg.Name, DSN: dsn})
	return dsn
}

// waitListening waits until n connections of db's database wait as
// listeners of package election's handoff channel, and returns their ids.
func waitListening(t *testing.T, dsn string, n int) []int64 {
	t.Helper()
	db := testdb.Raw(t, testdb.OpenDSN(t, dsn))
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids, err := dialect.MySQLWaiting(context.Background(), db, handoffChannel)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners wait after 30 s, want %d", len(ids), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMySQLHandoffAcrossProcesses: an Elector whose next tick is 24 s or
// more away takes the seat as soon as a leader in another process gives it
// up: only the wake-up, through the Elector's pool's listener, explains it.
func TestMySQLHandoffAcrossProcesses(t *testing.T) {
	dsn := freshMySQL(t)
	ns := testdb.Namespace(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestMySQLHandoffHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), handoffHelperEnv+"="+ns, testdb.MySQLEnv+"="+dsn, testdb.OnlyEnv+"=mysql")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the leader's process: %v", err)
		}
	}()
	lines := bufio.NewScanner(out)
	expect := func(word string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == word {
				return
			}
		}
		t.Fatalf("the leader's process ended before saying %q", word)
	}
	expect("leading")

	db := testdb.OpenDSN(t, dsn)
	e, err := election.New(db, election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	const interval = 30 * time.Second
	leading, seen := make(chan election.Lease, 1), make(chan election.Lease, 8)
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		Interval:         interval,
		OnStartedLeading: func(_ context.Context, l election.Lease) { leading <- l },
		OnNewLeader:      func(l election.Lease) { seen <- l },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case l := <-seen:
		if l.Vacant() || l.HeldBy(el.ID()) {
			t.Fatalf("the Elector's first round saw %+v, want the other process leading", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("no first round within a minute")
	}
	waitListening(t, dsn, 1)

	if _, err := io.WriteString(in, "vacate\n"); err != nil {
		t.Fatal(err)
	}
	expect("vacated")
	// The next tick comes 0.8 × interval after the first round at the
	// earliest.
	select {
	case l := <-leading:
		t.Logf("leading in term %d", l.Term)
	case <-time.After(interval * 8 / 10 / 2):
		t.Fatalf("the Elector did not take the vacated seat within %v: it was not woken", interval*8/10/2)
	}
}

// TestMySQLResignNotRetakenByOwnWake: a leader that resigns is not woken by
// its own vacancy through its pool's listener (which, with an empty payload,
// would wake every candidate of the pool, itself too, and let it take the
// seat back at once): this process's listeners are handed the payload,
// which names the candidate that vacated. It leads again only after sitting
// out a tick.
func TestMySQLResignNotRetakenByOwnWake(t *testing.T) {
	dsn := freshMySQL(t)
	db := testdb.OpenDSN(t, dsn)
	e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	const interval = 5 * time.Second
	leading := make(chan time.Time, 4)
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		Interval:         interval,
		OnStartedLeading: func(context.Context, election.Lease) { leading <- time.Now() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-leading:
	case <-time.After(time.Minute):
		t.Fatal("not leading within a minute")
	}
	waitListening(t, dsn, 1)
	if err := el.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	// A wake-up would make it lead again within milliseconds; sitting out
	// a tick takes 0.8 × interval at least. Half that tells them apart.
	select {
	case at := <-leading:
		t.Fatalf("the Elector led again %v after resigning: its own vacancy woke it", at.Sub(resigned))
	case <-time.After(interval * 8 / 10 / 2):
	}
}
