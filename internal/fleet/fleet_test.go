package fleet_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlelect/sqlelect/internal/fleet"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

func TestMain(m *testing.M) {
	fleet.MaybeChild()
	goleak.VerifyTestMain(m)
}

// A fleet of two processes leads every namespace, balanced; the parent
// sees their statements and CPU; a killed process's namespaces are led
// again by the other; the histories check out.
func TestFleet(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, _ := testdb.Shared(t, tg)
			var stderr fleet.Log
			const m = 6
			f, err := fleet.Start(fleet.Options{
				Procs: 2,
				Config: fleet.Config{
					DSN: dsn, Prefix: testdb.Namespace(t), Namespaces: m,
					Expire: time.Second, Balance: true, StatsEvery: 100 * time.Millisecond,
				},
				Command: func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") },
				Proxy:   tg.Name != "sqlite",
				Stderr:  &stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			defer func() {
				if t.Failed() {
					t.Logf("the processes' standard error:\n%s", stderr.String())
				}
			}()
			if _, err := f.WaitAllLed(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for f.MaxLed() > m/2 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := f.MaxLed(); got != m/2 {
				t.Errorf("one process leads %d, want its share %d", got, m/2)
			}
			from := time.Now()
			time.Sleep(time.Second)
			to := time.Now()
			for _, pr := range f.Procs() {
				if n := pr.Statements(from, to); n <= 0 {
					t.Errorf("process %d sent %d statements in a second", pr.Index, n)
				}
				if !pr.Ready() {
					t.Errorf("process %d never said it was ready", pr.Index)
				}
			}
			if f.Starts(f.Started(), to) < m {
				t.Errorf("%d leaderships started, want at least %d", f.Starts(f.Started(), to), m)
			}
			// Every namespace began a term; a term led twice is one.
			if n, starts := f.NewTerms(f.Started(), to), f.Starts(f.Started(), to); n < m || n > starts {
				t.Errorf("%d new terms, want from %d to the %d leaderships started", n, m, starts)
			}
			victim := f.Procs()[0]
			orphans := victim.LeadingNames()
			f.Kill(victim)
			if victim.Leading() != 0 {
				t.Errorf("a killed process still counts %d namespaces", victim.Leading())
			}
			if _, err := f.WaitAllLed(time.Now().Add(15 * time.Second)); err != nil {
				t.Fatalf("after killing a process that led %v: %v", orphans, err)
			}
			res, err := f.Stop(30 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if res.Total() != 0 {
				t.Fatal(res.Err())
			}
			if res.Terms < m {
				t.Errorf("the checker saw %d terms, want at least %d", res.Terms, m)
			}
			stops := f.Stops(f.Started(), time.Now())
			if stops["shutdown"] == 0 {
				t.Errorf("no leadership ended for shutdown: %v", stops)
			}
		})
	}
}

func TestConfigRequired(t *testing.T) {
	if _, err := fleet.Start(fleet.Options{Procs: 1}); err == nil {
		t.Fatal("Start without a command or namespaces succeeded")
	}
}

// TestLogTail: Tail keeps the last lines and says how many came before.
func TestLogTail(t *testing.T) {
	var l fleet.Log
	for i := range 5 {
		fmt.Fprintf(&l, "line %d\n", i)
	}
	if got, want := l.Tail(2), "(3 lines before)\nline 3\nline 4"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got, want := l.Tail(10), "line 0\nline 1\nline 2\nline 3\nline 4"; got != want {
		t.Errorf("Tail(10) = %q, want %q", got, want)
	}
}
