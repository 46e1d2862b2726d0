package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cli runs the command with args and stdin, without SQLELECT_DSN.
func cli(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, args, strings.NewReader(stdin), &out, &errb, func(string) string { return "" })
	return code, out.String(), errb.String()
}

// jsonLines decodes every line of out into a map.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		rows = append(rows, m)
	}
	return rows
}

// runElectors starts two Electors in ns on db, labelled alpha and beta, and
// waits until one leads; it returns the leader's Elector and the other.
func runElectors(t *testing.T, db *gorm.DB, ns string) (leader, other *election.Elector) {
	t.Helper()
	var els []*election.Elector
	for _, label := range []string{"alpha", "beta"} {
		e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(time.Second), election.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = el.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		els = append(els, el)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, el := range els {
			if el.IsLeader() {
				return el, els[1-i]
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no Elector leads")
	return nil, nil
}

// TestCommand runs the command against each database while two Electors
// take part in a namespace: status, candidates and history in text and
// JSON, watch seeing the handoff that resign causes, and the exit codes.
func TestCommand(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, db := testdb.Shared(t, tg)
			ns := testdb.Namespace(t)
			leader, _ := runElectors(t, db, ns)
			lease := leader.Lease()

			// status, text and JSON.
			code, out, errs := cli(t, "", "status", "--dsn", dsn, ns)
			if code != exitOK || !strings.Contains(out, ns) || !strings.Contains(out, lease.Leader.String()) ||
				!strings.Contains(out, "LEASE LEFT") {
				t.Fatalf("status: %d %q %q", code, out, errs)
			}
			code, out, _ = cli(t, "", "status", "--dsn", dsn, "--json", ns)
			rows := jsonLines(t, out)
			if code != exitOK || len(rows) != 1 {
				t.Fatalf("status --json: %d %q", code, out)
			}
			r := rows[0]
			if r["namespace"] != ns || r["leader"] != lease.Leader.String() || r["term"].(float64) < 1 || r["candidates"].(float64) != 2 {
				t.Errorf("status --json: %v", r)
			}
			if left := r["lease_remaining_ms"].(float64); left <= 0 || left > 1000 {
				t.Errorf("lease_remaining_ms %v, want in (0, 1000]", left)
			}
			if r["label"] != "alpha" && r["label"] != "beta" {
				t.Errorf("status --json label %v", r["label"])
			}

			// candidates
			code, out, _ = cli(t, "", "candidates", "--dsn", dsn, "--json", ns)
			rows = jsonLines(t, out)
			leaders := 0
			for _, r := range rows {
				if r["leader"] == true {
					leaders++
				}
			}
			if code != exitOK || len(rows) != 2 || leaders != 1 {
				t.Errorf("candidates --json: %d %q", code, out)
			}

			// watch, while an operator vacates the seat.
			wctx, stopWatch := context.WithCancel(context.Background())
			var wout lockedBuffer
			wdone := make(chan int, 1)
			go func() {
				wdone <- run(wctx, []string{"watch", "--dsn", dsn, "--json", "--interval", "50ms", ns}, strings.NewReader(""), &wout, &wout, func(string) string { return "" })
			}()
			waitOutput(t, &wout, `"event":"leader"`)

			// resign without confirmation changes nothing.
			if code, _, errs := cli(t, "n\n", "resign", "--dsn", dsn, ns); code != exitError || !strings.Contains(errs, "not confirmed") {
				t.Errorf("resign answered n: %d %q", code, errs)
			}
			if l := leader.Lease(); l.Term != lease.Term || !leader.IsLeader() {
				t.Errorf("after a refused resign the leader has %+v", l)
			}
			code, out, errs = cli(t, "", "resign", "--dsn", dsn, "--yes", "--json", ns)
			rows = jsonLines(t, out)
			if code != exitOK || len(rows) != 1 || rows[0]["vacated"] != true || rows[0]["term"].(float64) != float64(lease.Term) {
				t.Fatalf("resign --yes: %d %q %q", code, out, errs)
			}
			// The watch sees a leader in a later term.
			waitFor(t, 10*time.Second, "watch reports a new term", func() bool {
				for _, r := range jsonLines(t, wout.String()) {
					if r["event"] == "leader" && r["term"].(float64) > float64(lease.Term) {
						return true
					}
				}
				return false
			})
			stopWatch()
			if c := <-wdone; c != exitOK {
				t.Errorf("watch exited %d: %s", c, wout.String())
			}

			// history: the vacated term.
			code, out, _ = cli(t, "", "history", "--dsn", dsn, "--json", "--limit", "10", ns)
			found := false
			for _, r := range jsonLines(t, out) {
				if r["term"].(float64) == float64(lease.Term) && r["end_reason"] == "vacated" && r["leader"] == lease.Leader.String() {
					found = true
				}
			}
			if code != exitOK || !found {
				t.Errorf("history --json does not show term %d vacated: %q", lease.Term, out)
			}
			code, out, _ = cli(t, "", "history", "--dsn", dsn, ns)
			if code != exitOK || !strings.Contains(out, "vacated") || !strings.Contains(out, "TERM") {
				t.Errorf("history: %d %q", code, out)
			}

			// --require-leader fails on a namespace nobody leads.
			empty := testdb.Namespace(t)
			if code, _, errs := cli(t, "", "status", "--dsn", dsn, "--require-leader", ns, empty); code != exitError || !strings.Contains(errs, "without a leader") {
				t.Errorf("status --require-leader with a leaderless namespace: %d %q", code, errs)
			}
			waitFor(t, 10*time.Second, "a leader again", func() bool {
				code, _, _ := cli(t, "", "status", "--dsn", dsn, "--require-leader", ns)
				return code == exitOK
			})
		})
	}
}

func waitOutput(t *testing.T, b *lockedBuffer, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, "output "+want, func() bool { return strings.Contains(b.String(), want) })
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: no %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUsage: usage errors exit 2, help exits 0, a missing DSN and missing
// tables exit 1 with a message that says what to do, and a password never
// appears in an error.
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, exitUsage, "Commands:"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"help"}, exitOK, ""},
		{[]string{"status", "--help"}, exitOK, "Example:"},
		{[]string{"help", "resign"}, exitOK, "Example:"},
		{[]string{"status", "--bogus"}, exitUsage, "flag provided but not defined"},
		{[]string{"candidates"}, exitUsage, "one namespace"},
		{[]string{"history", "a", "b"}, exitUsage, "one namespace"},
		{[]string{"history", "--limit", "0", "a"}, exitUsage, "--limit"},
		{[]string{"resign"}, exitUsage, "one namespace"},
		{[]string{"migrate"}, exitUsage, "migrate up|status|sql"},
		{[]string{"migrate", "sideways"}, exitUsage, "unknown migrate command"},
		{[]string{"migrate", "sql", "--dialect", "oracle"}, exitUsage, "--dialect"},
		{[]string{"status"}, exitError, "SQLELECT_DSN"},
		{[]string{"status", "--dsn", "postgres://u:hunter2secret@127.0.0.1:1/db?connect_timeout=1"}, exitError, "127.0.0.1:1"},
		{[]string{"status", "--dsn", "sqlite:" + filepath.Join(t.TempDir(), "empty.db")}, exitError, "sqlelect migrate up"},
	} {
		code, out, errs := cli(t, "", c.args...)
		if code != c.code || !strings.Contains(out+errs, c.msg) {
			t.Errorf("%v: exit %d, want %d; output %q, want it to contain %q", c.args, code, c.code, out+errs, c.msg)
		}
		if strings.Contains(out+errs, "hunter2secret") {
			t.Errorf("%v: the password is in the output: %q", c.args, out+errs)
		}
	}
	code, out, _ := cli(t, "", "migrate", "sql", "--dialect", "postgres")
	if code != exitOK || !strings.Contains(out, "CREATE TABLE") || !strings.Contains(out, "-- sqlelect version 2") {
		t.Errorf("migrate sql: %d %q", code, out)
	}
}

// TestBinary builds the command and runs it as a user would, with
// SQLELECT_DSN: migrate up, then status --json on a namespace with a
// leader.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sqlelect")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	env := append(os.Environ(), "SQLELECT_DSN="+dsn)
	cmd := exec.Command(bin, "migrate", "up")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	db := testdb.OpenDSN(t, dsn)
	ns := testdb.Namespace(t)
	leader, _ := runElectors(t, db, ns)
	cmd = exec.Command(bin, "status", "--json", ns)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	rows := jsonLines(t, string(out))
	if len(rows) != 1 || rows[0]["leader"] != leader.Lease().Leader.String() {
		t.Errorf("status --json: %q", out)
	}
	cmd = exec.Command(bin, "status", "--require-leader", testdb.Namespace(t))
	cmd.Env = env
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != exitError {
		t.Errorf("status --require-leader of an empty namespace: %v", err)
	}
}

// TestDashboardCommand serves the dashboard on a free port until the
// context ends, and its api/state answers.
func TestDashboardCommand(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	if code, _, errs := cli(t, "", "migrate", "up", "--dsn", dsn); code != exitOK {
		t.Fatalf("migrate up: %s", errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dashboard", "--dsn", dsn, "--listen", "127.0.0.1:0"}, strings.NewReader(""), &out, &out, func(string) string { return "" })
	}()
	waitOutput(t, &out, "serving the dashboard on http://")
	line := out.String()
	url := strings.TrimSpace(line[strings.Index(line, "http://"):strings.Index(line, " (Ctrl-C")])
	resp, err := http.Get(url + "api/state")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("api/state: %s", resp.Status)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("dashboard exited %d: %s", code, out.String())
	}
}
