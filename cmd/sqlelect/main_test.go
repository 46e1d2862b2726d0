package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// The tests run the command as its users do: the binary, built once, in a
// process of its own, against each database, while Electors run in the
// test's process.

// raceBuild is set when the tests run with the race detector, which the
// binary is then built with too.
var raceBuild bool

// zone is the time zone the binary runs in: not UTC, and with a
// half-hour offset that no rounding produces by chance.
const (
	zone       = "Asia/Kolkata"
	zoneOffset = "+05:30"
)

var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin.dir != "" {
		os.RemoveAll(bin.dir)
	}
	os.Exit(code)
}

// binary builds the command, once for all the tests.
func binary(t *testing.T) string {
	t.Helper()
	bin.once.Do(func() {
		if bin.dir, bin.err = os.MkdirTemp("", "sqlelect-test-"); bin.err != nil {
			return
		}
		bin.path = filepath.Join(bin.dir, "sqlelect")
		args := []string{"build", "-o", bin.path}
		if raceBuild {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	return bin.path
}

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

// cli runs the binary with the environment of the test process, without
// SQLELECT_DSN and in zone.
type cli struct {
	t   *testing.T
	env []string
}

func newCLI(t *testing.T, extraEnv ...string) cli {
	t.Helper()
	binary(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLELECT_DSN=") && !strings.HasPrefix(kv, "TZ=") {
			env = append(env, kv)
		}
	}
	return cli{t: t, env: append(append(env, "TZ="+zone), extraEnv...)}
}

// run runs the binary with stdin and args and returns its exit code and
// output.
func (c cli) run(stdin string, args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.path, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
	default:
		c.t.Fatalf("sqlelect %v: %v\n%s", args, err, errb.String())
	}
	if strings.Contains(errb.String(), "DATA RACE") {
		c.t.Errorf("sqlelect %v: the race detector reported:\n%s", args, errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// ok runs the binary with args, which must succeed without a word on
// stderr, and returns its stdout.
func (c cli) ok(args ...string) string {
	c.t.Helper()
	code, out, errs := c.run("", args...)
	if code != exitOK || errs != "" {
		c.t.Fatalf("sqlelect %v: exit %d, stderr %q", args, code, errs)
	}
	return out
}

// proc is the binary running in the background.
type proc struct {
	cmd         *exec.Cmd
	stdin       io.WriteCloser
	out, errOut lockedBuffer
	done        chan struct{}
}

// start starts the binary with args; it is killed when the test ends if
// it is still running.
func (c cli) start(args ...string) *proc {
	c.t.Helper()
	p := &proc{cmd: exec.Command(bin.path, args...), done: make(chan struct{})}
	p.cmd.Env = c.env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		_ = p.cmd.Wait()
	}()
	c.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("%v still running after a minute: %s %s", p.cmd.Args, p.out.String(), p.errOut.String())
	}
	if strings.Contains(p.errOut.String(), "DATA RACE") {
		t.Errorf("%v: the race detector reported:\n%s", p.cmd.Args, p.errOut.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// interrupt sends SIGINT, as Ctrl-C does, and returns the exit code.
func (p *proc) interrupt(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	return p.wait(t)
}

// waitFor polls cond until it holds, failing the test after within.
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

// table parses the aligned output of a command: a header naming cols, then
// one line per row, up to a blank line. Every cell of every row must start where its column's
// name starts in the header, after at least two spaces. It returns the
// rows' cells, trimmed, by column name.
func table(t *testing.T, out string, cols ...string) []map[string]string {
	t.Helper()
	// The table ends at the first blank line (a summary may follow).
	body, _, _ := strings.Cut(out, "\n\n")
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	header := lines[0]
	offs := make([]int, len(cols))
	for i, c := range cols {
		offs[i] = strings.Index(header, c)
		if offs[i] < 0 || (i > 0 && offs[i] <= offs[i-1]) {
			t.Fatalf("header %q: no column %q in order", header, c)
		}
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, off := range offs {
			if len(line) <= off || line[off] == ' ' || (off > 0 && line[off-2:off] != "  ") {
				t.Fatalf("column %q is not aligned with its header:\n%s", cols[i], out)
			}
			end := len(line)
			if i+1 < len(offs) {
				end = offs[i+1]
			}
			row[cols[i]] = strings.TrimSpace(line[off:end])
		}
		rows = append(rows, row)
	}
	return rows
}

// localTime checks that s is a time printed in zone, near now.
func localTime(t *testing.T, what, s string) {
	t.Helper()
	if !strings.HasSuffix(s, " "+zoneOffset) {
		t.Errorf("%s %q: not in the local zone (%s)", what, s, zoneOffset)
		return
	}
	at, err := time.Parse("2006-01-02 15:04:05.000 -07:00", s)
	if err != nil {
		t.Errorf("%s %q: %v", what, s, err)
		return
	}
	if d := time.Since(at); d < -time.Minute || d > 10*time.Minute {
		t.Errorf("%s %q is %v from now", what, s, d)
	}
}

// quiet is a logger that discards.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// candidate is an Elector running in the test's process.
type candidate struct {
	*election.Elector
	label string
	stop  func()
}

// startCandidate runs an Elector labelled label in ns until stop or the
// end of the test.
func startCandidate(t *testing.T, db *gorm.DB, ns, label string) *candidate {
	t.Helper()
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(2*time.Second), election.WithLabel(label),
		election.WithLogger(quiet))
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
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(stop)
	return &candidate{Elector: el, label: label, stop: stop}
}

// leading waits until one of cs leads and returns it, and the others.
func leading(t *testing.T, cs ...*candidate) (leader *candidate, others []*candidate) {
	t.Helper()
	waitFor(t, 20*time.Second, "leader", func() bool {
		for _, c := range cs {
			if c.IsLeader() {
				leader = c
				return true
			}
		}
		return false
	})
	for _, c := range cs {
		if c != leader {
			others = append(others, c)
		}
	}
	return leader, others
}

// identity is how the command shows a candidate of this process.
func identity(label string) string {
	host, _ := os.Hostname()
	return election.Identity{Hostname: host, PID: os.Getpid(), Label: label}.String()
}

// TestEndToEnd runs the binary against each database: migrate on an empty
// database, then status, candidates, watch, resign and history while
// Electors of this process take part in a namespace, checking the text
// (aligned, in the local zone) and the JSON.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			c := newCLI(t)
			t.Run("migrate", func(t *testing.T) { e2eMigrate(t, c, tg) })
			dsn, db := testdb.Shared(t, tg)
			ns := testdb.Namespace(t)
			alpha := startCandidate(t, db, ns, "alpha")
			beta := startCandidate(t, db, ns, "beta")
			leading(t, alpha, beta)
			t.Run("status", func(t *testing.T) { e2eStatus(t, c, dsn, ns, alpha, beta) })
			t.Run("watch", func(t *testing.T) { e2eWatch(t, c, tg, dsn, db, ns, alpha, beta) })
			t.Run("resign", func(t *testing.T) { e2eResign(t, c, dsn, db, ns, alpha, beta) })
			t.Run("history", func(t *testing.T) { e2eHistory(t, c, dsn, ns, alpha, beta) })
		})
	}
}

// e2eMigrate: on an empty database, status says to migrate, migrate status
// shows every version pending, migrate up applies them, and migrate sql
// prints every statement of the dialect.
func e2eMigrate(t *testing.T, c cli, tg testdb.Target) {
	fresh := testdb.Fresh(t, tg)
	if path, ok := strings.CutPrefix(fresh, "sqlite:"); ok {
		// An empty file is an empty database; a missing one is refused
		// (TestMissingDatabase).
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := migrate.Migrations(tg.Name)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errs := c.run("", "status", "--dsn", fresh)
	if code != exitError || !strings.Contains(errs, "run `sqlelect migrate up`") {
		t.Errorf("status on an empty database: exit %d, %q", code, errs)
	}
	out := c.ok("migrate", "status", "--json", "--dsn", fresh)
	rows := jsonLines(t, out)
	if len(rows) != len(ms) {
		t.Fatalf("migrate status --json before up: %q", out)
	}
	for i, r := range rows {
		if r["version"] != float64(ms[i].Version) || r["name"] != ms[i].Name || r["applied"] != false {
			t.Errorf("migrate status --json before up, row %d: %v", i, r)
		}
	}
	// The first migrate up says which versions it applied; the second,
	// that there was nothing to do.
	var applied []string
	for _, m := range ms {
		applied = append(applied, fmt.Sprintf("%d (%s)", m.Version, m.Name))
	}
	latest := ms[len(ms)-1].Version
	if out, want := c.ok("migrate", "up", "--dsn", fresh), fmt.Sprintf("applied versions %s; the election tables are up to date (version %d)\n",
		strings.Join(applied, ", "), latest); out != want {
		t.Fatalf("the first migrate up: %q, want %q", out, want)
	}
	if out, want := c.ok("migrate", "up", "--dsn", fresh), fmt.Sprintf("the election tables are already up to date (version %d); nothing applied\n",
		latest); out != want {
		t.Fatalf("the second migrate up: %q, want %q", out, want)
	}
	out = c.ok("migrate", "status", "--dsn", fresh)
	trows := table(t, out, "VERSION", "NAME", "STATE")
	if len(trows) != len(ms) {
		t.Fatalf("migrate status after up: %q", out)
	}
	for i, r := range trows {
		if r["VERSION"] != strconv.FormatInt(ms[i].Version, 10) || r["NAME"] != ms[i].Name || r["STATE"] != "applied" {
			t.Errorf("migrate status after up, row %d: %v", i, r)
		}
	}
	if out := c.ok("status", "--dsn", fresh); !strings.Contains(out, "no namespaces yet") {
		t.Errorf("status on the migrated database: %q", out)
	}
	out = c.ok("migrate", "sql", "--dialect", tg.Name)
	for _, m := range ms {
		if !strings.Contains(out, fmt.Sprintf("-- sqlelect version %d: %s\n", m.Version, m.Name)) {
			t.Errorf("migrate sql: no heading for version %d", m.Version)
		}
		for _, s := range m.Up {
			if !strings.Contains(out, strings.TrimSpace(s)+";\n") {
				t.Errorf("migrate sql --dialect %s: missing statement %q", tg.Name, s)
			}
		}
	}
}

// e2eStatus: status and candidates show the leader, its identity, term,
// lease left and the candidates, as text and JSON; --require-leader.
func e2eStatus(t *testing.T, c cli, dsn, ns string, cs ...*candidate) {
	leader, others := leading(t, cs...)
	lease := leader.Observed()
	out := c.ok("status", "--dsn", dsn, ns)
	rows := table(t, out, "NAMESPACE", "LEADER", "IDENTITY", "TERM", "LEASE LEFT", "CANDIDATES")
	if len(rows) != 1 {
		t.Fatalf("status: %q", out)
	}
	if _, summary, _ := strings.Cut(out, "\n\n"); !regexp.MustCompile(`^1 namespace: 1 led, 0 without a leader; \d+ leadership changes? in the last hour \(1 of \d+ namespaces shown\)\n$`).MatchString(summary) {
		t.Errorf("status: summary %q", summary)
	}
	r := rows[0]
	if r["NAMESPACE"] != ns || r["LEADER"] != lease.Leader.String() || r["IDENTITY"] != identity(leader.label) ||
		r["TERM"] != strconv.FormatInt(lease.Term, 10) || r["CANDIDATES"] != "2" {
		t.Errorf("status row %v; want %s led by %s (%s) in term %d with 2 candidates", r, ns, lease.Leader, identity(leader.label), lease.Term)
	}
	if left, err := time.ParseDuration(r["LEASE LEFT"]); err != nil || left <= 0 || left > 2*time.Second {
		t.Errorf("LEASE LEFT %q: want a duration in (0, 2s] (%v)", r["LEASE LEFT"], err)
	}

	out = c.ok("status", "--dsn", dsn, "--json", ns)
	jrows := jsonLines(t, out)
	if len(jrows) != 1 {
		t.Fatalf("status --json: %q", out)
	}
	j := jrows[0]
	host, _ := os.Hostname()
	if j["namespace"] != ns || j["leader"] != lease.Leader.String() || j["term"] != float64(lease.Term) || j["candidates"] != float64(2) ||
		j["hostname"] != host || j["pid"] != float64(os.Getpid()) || j["label"] != leader.label {
		t.Errorf("status --json: %v", j)
	}
	if left, ok := j["lease_remaining_ms"].(float64); !ok || left <= 0 || left > 2000 {
		t.Errorf("lease_remaining_ms %v, want in (0, 2000]", j["lease_remaining_ms"])
	}
	for _, f := range []string{"acquired_at", "expires_at"} {
		if s, _ := j[f].(string); !strings.HasSuffix(s, "Z") {
			t.Errorf("%s %v: want RFC 3339 in UTC", f, j[f])
		}
	}

	if code, _, errs := c.run("", "status", "--dsn", dsn, "--require-leader", ns); code != exitOK {
		t.Errorf("status --require-leader of a led namespace: exit %d, %q", code, errs)
	}
	empty := testdb.Namespace(t)
	code, out, errs := c.run("", "status", "--dsn", dsn, "--require-leader", "--allow-unknown", ns, empty)
	if code != exitError || !strings.Contains(errs, "1 namespace(s) without a leader") {
		t.Errorf("status --require-leader with a leaderless namespace: exit %d, %q", code, errs)
	}
	if rows := table(t, out, "NAMESPACE", "LEADER", "IDENTITY", "TERM", "LEASE LEFT", "CANDIDATES"); len(rows) != 2 ||
		rows[1]["NAMESPACE"] != empty || rows[1]["LEADER"] != "(none)" || rows[1]["CANDIDATES"] != "0" {
		t.Errorf("status of a namespace without a leader: %q", out)
	}

	// candidates
	out = c.ok("candidates", "--dsn", dsn, ns)
	crows := table(t, out, "NAMESPACE", "CANDIDATE", "IDENTITY", "LEADER", "REGISTERED", "LAST HEARTBEAT")
	want := map[string]*candidate{leader.ID().String(): leader, others[0].ID().String(): others[0]}
	if len(crows) != 2 {
		t.Fatalf("candidates: %q", out)
	}
	if _, summary, _ := strings.Cut(out, "\n\n"); summary != "2 live candidates in 1 namespace, from 2 processes\n" {
		t.Errorf("candidates: summary %q", summary)
	}
	for _, r := range crows {
		if r["NAMESPACE"] != ns {
			t.Errorf("candidates row %v: namespace", r)
		}
		cand := want[r["CANDIDATE"]]
		if cand == nil {
			t.Errorf("candidates: unknown row %v", r)
			continue
		}
		mark := "-"
		if cand == leader {
			mark = "yes"
		}
		if r["IDENTITY"] != identity(cand.label) || r["LEADER"] != mark {
			t.Errorf("candidates row %v, want identity %s, leader %s", r, identity(cand.label), mark)
		}
		localTime(t, "REGISTERED", r["REGISTERED"])
		localTime(t, "LAST HEARTBEAT", r["LAST HEARTBEAT"])
	}
	out = c.ok("candidates", "--dsn", dsn, "--json", ns)
	jrows = jsonLines(t, out)
	if len(jrows) != 2 {
		t.Fatalf("candidates --json: %q", out)
	}
	for _, j := range jrows {
		cand := want[fmt.Sprint(j["id"])]
		if cand == nil || j["namespace"] != ns || j["leader"] != (cand == leader) || j["label"] != cand.label || j["pid"] != float64(os.Getpid()) {
			t.Errorf("candidates --json: %v", j)
		}
	}
}

// watchLine is a text line of watch: time, namespace, what happened. Its
// groups: 1 time, 2 namespace; a new leader: 4 id, 5 identity, 6 term, 7
// how long the seat had no leader; a vacancy: 9 the term that ended, 10
// its leader, 11 its identity, 12 how it ended; a candidate: 13 id, 14
// identity, 15 joined or left.
var watchLine = regexp.MustCompile(`^(\d\d:\d\d:\d\d\.\d{3})  (\S+)\s+(leader (\S+) \((.+)\), term (\d+)(?:, after (\S+) without a leader)?|` +
	`no leader(: term (\d+) of (\S+) \((.+)\) (resigned|expired|was vacated by an operator|ended: its leader unregistered))?|` +
	`candidate (\S+) \((.+)\) (joined|left))$`)

// e2eWatch: two watches, text and JSON, see the current leader, a
// candidate joining, a handoff and the candidate leaving; on the databases
// that push vacancies, a watch that reads the tables only once a minute
// still sees a handoff at once.
func e2eWatch(t *testing.T, c cli, tg testdb.Target, dsn string, db *gorm.DB, ns string, cs ...*candidate) {
	leader, _ := leading(t, cs...)
	lease := leader.Observed()
	text := c.start("watch", "--dsn", dsn, "--interval", "200ms", ns)
	js := c.start("watch", "--dsn", dsn, "--interval", "200ms", "--json", ns)

	// textSaw and jsonSaw report whether a watch printed a line matching.
	textSaw := func(match func(m []string) bool) bool {
		for _, line := range strings.Split(text.out.String(), "\n") {
			if m := watchLine.FindStringSubmatch(line); m != nil && m[2] == ns && match(m) {
				return true
			}
		}
		return false
	}
	jsonSaw := func(match func(ev map[string]any) bool) bool {
		out := js.out.String()
		if i := strings.LastIndexByte(out, '\n'); i >= 0 {
			out = out[:i+1] // whole lines only
		} else {
			out = ""
		}
		for _, ev := range jsonLines(t, out) {
			if ev["namespace"] == ns && match(ev) {
				return true
			}
		}
		return false
	}
	sawLeader := func(id uuid.UUID, term int64, label string) {
		t.Helper()
		waitFor(t, 10*time.Second, fmt.Sprintf("text watch line: leader %s in term %d", id, term), func() bool {
			return textSaw(func(m []string) bool {
				return m[4] == id.String() && m[5] == identity(label) && m[6] == strconv.FormatInt(term, 10)
			})
		})
		waitFor(t, 10*time.Second, fmt.Sprintf("JSON watch event: leader %s in term %d", id, term), func() bool {
			return jsonSaw(func(ev map[string]any) bool {
				return ev["event"] == "leader" && ev["leader"] == id.String() && ev["term"] == float64(term) && ev["label"] == label
			})
		})
	}
	sawCandidate := func(id uuid.UUID, label, event string) {
		t.Helper()
		waitFor(t, 10*time.Second, fmt.Sprintf("text watch line: candidate %s %s", id, event), func() bool {
			return textSaw(func(m []string) bool { return m[13] == id.String() && m[14] == identity(label) && m[15] == event })
		})
		waitFor(t, 10*time.Second, fmt.Sprintf("JSON watch event: candidate %s %s", id, event), func() bool {
			return jsonSaw(func(ev map[string]any) bool {
				return ev["event"] == event && ev["candidate"] == id.String() && ev["label"] == label
			})
		})
	}
	sawLeader(lease.Leader, lease.Term, leader.label)

	gamma := startCandidate(t, db, ns, "gamma")
	sawCandidate(gamma.ID(), "gamma", "joined")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var nl election.Lease
	var next *candidate
	waitFor(t, 10*time.Second, "a new term", func() bool {
		for _, c := range append(cs, gamma) {
			if l := c.Observed(); c.IsLeader() && l.Term > lease.Term {
				next, nl = c, l
				return true
			}
		}
		return false
	})
	sawLeader(nl.Leader, nl.Term, next.label)
	// Both ends of the handoff, at the times the history records, whether
	// or not a reading fell between them.
	sawHandoff(t, db, ns, lease, leader.label, textSaw, jsonSaw)

	gamma.stop()
	sawCandidate(gamma.ID(), "gamma", "left")

	for _, p := range []*proc{text, js} {
		if code := p.interrupt(t); code != exitOK {
			t.Errorf("%v interrupted: exit %d, %s", p.cmd.Args, code, p.errOut.String())
		}
	}
	// Every line is well formed.
	for _, line := range strings.Split(strings.TrimSpace(text.out.String()), "\n") {
		if !watchLine.MatchString(line) {
			t.Errorf("watch: line %q is not a watch line", line)
		}
	}
	for _, ev := range jsonLines(t, js.out.String()) {
		at, _ := ev["time"].(string)
		if _, err := time.Parse(time.RFC3339Nano, at); err != nil || !strings.HasSuffix(at, "Z") {
			t.Errorf("watch --json: time %q is not RFC 3339 in UTC", at)
		}
		switch ev["event"] {
		case "leader", "vacant", "joined", "left":
		default:
			t.Errorf("watch --json: event %v", ev)
		}
	}

	// Where the library wakes candidates in other processes, watch is told
	// of vacancies too; wherever it says it is told, it is.
	told := strings.Contains(text.errOut.String(), "told of vacated seats by the database")
	if testdb.WakesOtherPools(tg) && !told {
		t.Errorf("watch on %s says %q; want told of vacated seats", tg.Name, text.errOut.String())
	}
	if !told {
		return
	}
	// Reading the tables once a minute, the watch still sees a handoff
	// within seconds: it is told of the vacancy.
	slow := c.start("watch", "--dsn", dsn, "--interval", "1m", "--json", ns)
	waitFor(t, 10*time.Second, "the slow watch's first line", func() bool { return strings.Contains(slow.out.String(), "\n") })
	leader, _ = leading(t, cs...)
	lease = leader.Observed()
	if !strings.Contains(slow.out.String(), `"term":`+strconv.FormatInt(lease.Term, 10)) {
		t.Fatalf("the slow watch does not show term %d: %s", lease.Term, slow.out.String())
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := leader.Resign(rctx); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	var seen time.Time
	waitFor(t, 10*time.Second, "the slow watch to see a later term", func() bool {
		for _, ev := range jsonLines(t, slow.out.String()) {
			if ev["event"] == "leader" && ev["term"].(float64) > float64(lease.Term) {
				seen, _ = time.Parse(time.RFC3339Nano, ev["time"].(string))
				return true
			}
		}
		return false
	})
	t.Logf("%s: watch --interval 1m printed the new leader %v after Resign returned", tg.Name, seen.Sub(resigned).Round(time.Millisecond))
	if code := slow.interrupt(t); code != exitOK {
		t.Errorf("slow watch interrupted: exit %d, %s", code, slow.errOut.String())
	}
}

// sawHandoff waits until the text and the JSON watch show the end of
// term old (resigned) and the grant of the next term, each at the time the
// history records it, and the time between them.
func sawHandoff(t *testing.T, db *gorm.DB, ns string, old election.Lease, label string,
	textSaw func(func([]string) bool) bool, jsonSaw func(func(map[string]any) bool) bool) {
	t.Helper()
	e, err := election.New(db, election.WithNamespace(ns), election.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	terms, err := e.History(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ended, next election.TermRecord
	for _, tr := range terms {
		switch tr.Term {
		case old.Term:
			ended = tr
		case old.Term + 1:
			next = tr
		}
	}
	if ended.EndReason != election.EndResigned || next.Term == 0 {
		t.Fatalf("history: term %d %+v, term %d %+v", old.Term, ended, old.Term+1, next)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	clock := func(at time.Time) string { return at.In(loc).Format("15:04:05.000") }
	term := strconv.FormatInt(old.Term, 10)
	waitFor(t, 10*time.Second, "text watch line: term "+term+" resigned, at its end", func() bool {
		return textSaw(func(m []string) bool {
			return m[1] == clock(ended.EndedAt) && m[9] == term && m[10] == old.Leader.String() && m[11] == identity(label) && m[12] == "resigned"
		})
	})
	gap := next.AcquiredAt.Sub(ended.EndedAt)
	waitFor(t, 10*time.Second, "text watch line: the next term, at its grant, after the gap", func() bool {
		return textSaw(func(m []string) bool {
			return m[1] == clock(next.AcquiredAt) && m[6] == strconv.FormatInt(next.Term, 10) && m[4] == next.Leader.String() &&
				m[7] == (time.Duration(gap.Milliseconds())*time.Millisecond).String()
		})
	})
	at := func(v any) time.Time {
		at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(v))
		return at
	}
	waitFor(t, 10*time.Second, "JSON watch events: the vacancy and the grant at their times", func() bool {
		return jsonSaw(func(ev map[string]any) bool {
			return ev["event"] == "vacant" && ev["term"] == float64(old.Term) && ev["leader"] == old.Leader.String() &&
				ev["reason"] == "resigned" && at(ev["at"]).Equal(ended.EndedAt)
		}) && jsonSaw(func(ev map[string]any) bool {
			return ev["event"] == "leader" && ev["term"] == float64(next.Term) && at(ev["at"]).Equal(next.AcquiredAt) &&
				ev["vacant_ms"] == float64(gap.Milliseconds())
		})
	})
}

// e2eResign: resign asks, naming the leader and term; refused, nothing
// changes; confirmed, exactly that term ends and the other candidate leads;
// a seat that moves on while the operator confirms is left alone.
func e2eResign(t *testing.T, c cli, dsn string, db *gorm.DB, ns string, cs ...*candidate) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	guard, err := election.New(db, election.WithNamespace(ns), election.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	// Settle: one leader, whose term the others see too.
	leader, others := leading(t, cs...)
	old := leader.Observed()
	prompt := fmt.Sprintf("Vacate %q, led by %s (%s) in term %d? [y/N]", ns, old.Leader, identity(leader.label), old.Term)

	code, _, errs := c.run("n\n", "resign", "--dsn", dsn, ns)
	if code != exitError || !strings.Contains(errs, prompt) || !strings.Contains(errs, "not confirmed; nothing changed") {
		t.Errorf("resign answered n: exit %d, %q; want the prompt %q", code, errs, prompt)
	}
	if err := guard.Guard(ctx, old); err != nil {
		t.Fatalf("after a refused resign, Guard(the leader's lease) = %v", err)
	}

	code, out, errs := c.run("y\n", "resign", "--dsn", dsn, ns)
	if code != exitOK || strings.TrimSpace(errs) != prompt ||
		!strings.Contains(out, fmt.Sprintf("vacated %q: term %d of %s", ns, old.Term, old.Leader)) {
		t.Fatalf("resign answered y: exit %d, %q %q", code, out, errs)
	}
	if err := guard.Guard(ctx, old); !errors.Is(err, election.ErrNotLeader) {
		t.Errorf("after resign, Guard(the old lease) = %v, want ErrNotLeader", err)
	}
	other := others[0]
	waitFor(t, 10*time.Second, "the other candidate leading in a later term", func() bool {
		return other.IsLeader() && other.Observed().Term > old.Term
	})
	waitFor(t, 10*time.Second, "the old leader stepping down", func() bool { return !leader.IsLeader() })
	terms, err := guard.History(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	vacated := false
	for _, tr := range terms {
		if tr.Term == old.Term {
			vacated = tr.Leader == old.Leader && tr.EndReason == election.EndVacated
		}
	}
	if !vacated {
		t.Errorf("history does not show term %d of %s vacated: %+v", old.Term, old.Leader, terms)
	}

	// The operator is asked about the other's term; meanwhile it hands
	// over. The confirmation then changes nothing.
	cur := other.Observed()
	p := c.start("resign", "--dsn", dsn, ns)
	waitFor(t, 10*time.Second, "the prompt", func() bool {
		return strings.Contains(p.errOut.String(), fmt.Sprintf("in term %d? [y/N]", cur.Term))
	})
	if err := other.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the first leader back in a later term", func() bool {
		return leader.IsLeader() && leader.Observed().Term > cur.Term
	})
	now := leader.Observed()
	if _, err := io.WriteString(p.stdin, "y\n"); err != nil {
		t.Fatal(err)
	}
	p.stdin.Close()
	if code := p.wait(t); code != exitError || !strings.Contains(p.errOut.String(), fmt.Sprintf("moved on: term %d of %s is over", cur.Term, cur.Leader)) ||
		!strings.Contains(p.errOut.String(), "nothing changed") {
		t.Errorf("resign confirmed after the seat moved on: exit %d, %q", code, p.errOut.String())
	}
	if err := guard.Guard(ctx, now); err != nil {
		t.Errorf("the resign of an ended term ended the next one: Guard = %v", err)
	}

	// --yes --json
	code, out, errs = c.run("", "resign", "--dsn", dsn, "--yes", "--json", ns)
	rows := jsonLines(t, out)
	if code != exitOK || len(rows) != 1 || rows[0]["vacated"] != true || rows[0]["leader"] != now.Leader.String() ||
		rows[0]["term"] != float64(now.Term) || rows[0]["current_leader"] != nil {
		t.Errorf("resign --yes --json: exit %d, %q %q; want term %d of %s vacated", code, out, errs, now.Term, now.Leader)
	}
	waitFor(t, 10*time.Second, "the other candidate leading again", func() bool {
		return other.IsLeader() && other.Observed().Term > now.Term
	})

	// Nobody leads: nothing to do.
	empty := testdb.Namespace(t)
	if code, out, _ := c.run("", "resign", "--dsn", dsn, "--yes", "--allow-unknown", empty); code != exitOK || !strings.Contains(out, "no leader; nothing changed") {
		t.Errorf("resign of a namespace without a leader: exit %d, %q", code, out)
	}
}

// e2eHistory: history --limit shows the newest terms first, the running
// one and the vacated ones, aligned and in the local zone.
func e2eHistory(t *testing.T, c cli, dsn, ns string, cs ...*candidate) {
	leader, _ := leading(t, cs...)
	lease := leader.Observed()
	out := c.ok("history", "--dsn", dsn, "--json", "--limit", "2", ns)
	rows := jsonLines(t, out)
	if len(rows) != 2 {
		t.Fatalf("history --json --limit 2: %q", out)
	}
	if r := rows[0]; r["term"] != float64(lease.Term) || r["leader"] != lease.Leader.String() || r["end_reason"] != "" || r["ended_at"] != nil {
		t.Errorf("history --json: newest %v, want term %d of %s running", r, lease.Term, lease.Leader)
	}
	if r := rows[1]; r["term"] != float64(lease.Term-1) || r["end_reason"] != "vacated" {
		t.Errorf("history --json: second %v, want term %d vacated", r, lease.Term-1)
	}
	out = c.ok("history", ns, "--dsn", dsn, "--limit", "3") // flags after the namespace too
	trows := table(t, out, "TERM", "LEADER", "IDENTITY", "FROM", "UNTIL", "ENDED")
	if len(trows) != 3 {
		t.Fatalf("history --limit 3: %q", out)
	}
	for i, r := range trows {
		if r["TERM"] != strconv.FormatInt(lease.Term-int64(i), 10) {
			t.Errorf("history row %d: %v, want term %d", i, r, lease.Term-int64(i))
		}
		localTime(t, "FROM", r["FROM"])
		if i == 0 {
			if r["UNTIL"] != "-" || r["ENDED"] != "(running)" || r["IDENTITY"] != identity(leader.label) {
				t.Errorf("history: running term %v", r)
			}
			continue
		}
		localTime(t, "UNTIL", r["UNTIL"])
		if r["ENDED"] != "vacated" && r["ENDED"] != "resigned" {
			t.Errorf("history: row %v, want vacated or resigned", r)
		}
	}
}

// commands are every command and subcommand, for the help checks.
var commands = [][]string{
	{"migrate"}, {"migrate", "up"}, {"migrate", "status"}, {"migrate", "sql"},
	{"status"}, {"candidates"}, {"history"}, {"watch"}, {"resign"}, {"dashboard"}, {"version"},
}

// TestUsage: help on every command, with an example, on stdout with exit
// 0; usage errors exit 2; errors exit 1 with a message that says what to
// do, and never a password.
func TestUsage(t *testing.T) {
	c := newCLI(t)
	for _, cmd := range commands {
		name := strings.Join(cmd, " ")
		for _, args := range [][]string{append(append([]string{}, cmd...), "--help"), append([]string{"help"}, cmd...)} {
			if cmd[0] == "migrate" && args[0] == "help" && len(cmd) > 1 {
				continue // help takes one command: "help migrate"
			}
			code, out, errs := c.run("", args...)
			if code != exitOK || !strings.Contains(out, "Example:\n  sqlelect "+name) || errs != "" {
				t.Errorf("%v: exit %d; want the help with an example of %q on stdout:\n%s%s", args, code, name, out, errs)
			}
		}
	}
	code, out, _ := c.run("", "help")
	if code != exitOK || !strings.Contains(out, "Commands:") || !strings.Contains(out, "Exit codes:") {
		t.Errorf("help: exit %d, %q", code, out)
	}

	for _, u := range []struct {
		args []string
		msg  string
	}{
		{nil, "Commands:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"status", "--bogus"}, "flag provided but not defined"},
		{[]string{"status", "--unled", "--leader", "x"}, "exclude each other"},
		{[]string{"candidates", "--leader", "x", "--unled"}, "exclude each other"},
		{[]string{"version", "extra"}, "no arguments"},
		{[]string{"history", "a", "b"}, "one namespace"},
		{[]string{"history", "--limit", "0", "a"}, "--limit"},
		{[]string{"resign"}, "one namespace"},
		{[]string{"watch", "--interval", "1ms"}, "--interval"},
		{[]string{"dashboard", "extra"}, "no arguments"},
		{[]string{"migrate"}, "migrate up|status|sql"},
		{[]string{"migrate", "sideways"}, "unknown migrate command"},
		{[]string{"migrate", "up", "extra"}, "no arguments"},
		{[]string{"migrate", "sql", "--dialect", "oracle"}, "--dialect"},
	} {
		code, out, errs := c.run("", u.args...)
		if code != exitUsage || !strings.Contains(errs, u.msg) || out != "" {
			t.Errorf("%v: exit %d, want %d; stderr %q, want it to contain %q (stdout %q)", u.args, code, exitUsage, errs, u.msg, out)
		}
	}

	secret := "hunter2secret"
	errCases := []struct {
		args []string
		msg  string
	}{
		{[]string{"status"}, "SQLELECT_DSN"},
		{[]string{"status", "--dsn", "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=1"}, "127.0.0.1:1"},
		{[]string{"status", "--dsn", "mysql://root:" + secret + "@tcp(127.0.0.1:1)/test?timeout=1s"}, "127.0.0.1:1"},
		{[]string{"watch", "--dsn", "mysql://root:" + secret + "@tcp(127.0.0.1:1)/test?timeout=1s"}, "127.0.0.1:1"},
		{[]string{"status", "--dsn", "sqlite:" + emptyFile(t)}, "run `sqlelect migrate up`"},
	}
	// A wrong password for a server that answers: refused, and not shown.
	for _, tg := range testdb.Targets(t) {
		switch tg.Name {
		case "mysql":
			if dsn := withPassword(t, tg.DSN, secret); dsn != "" {
				errCases = append(errCases, struct {
					args []string
					msg  string
				}{[]string{"status", "--dsn", dsn}, "Access denied"})
			}
		}
	}
	for _, e := range errCases {
		code, out, errs := c.run("", e.args...)
		if code != exitError || !strings.Contains(errs, e.msg) {
			t.Errorf("%v: exit %d, want %d; stderr %q, want it to contain %q", e.args, code, exitError, errs, e.msg)
		}
		if strings.Contains(out+errs, secret) {
			t.Errorf("%v: the password is in the output: %q", e.args, out+errs)
		}
	}
}

// emptyFile returns the path of an empty file: an empty SQLite database.
func emptyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// withPassword returns the MySQL DSN with its password replaced, or "" when
// the form is not mysql://user@tcp(...)/db.
func withPassword(t *testing.T, dsn, password string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(dsn, "mysql://")
	if !ok {
		return ""
	}
	at := strings.Index(rest, "@")
	if at < 0 {
		return ""
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return "mysql://" + user + ":" + password + rest[at:]
}

// TestExamples runs the example of every command that ends by itself, on
// a database where the namespaces they name have leaders: each is a
// command line that works.
func TestExamples(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	c := newCLI(t, "SQLELECT_DSN="+dsn)
	if code, _, errs := c.run("", "migrate", "up"); code != exitOK {
		t.Fatalf("migrate up: %s", errs)
	}
	db := testdb.OpenDSN(t, dsn)
	for _, ns := range []string{"scheduler", "reaper"} {
		leading(t, startCandidate(t, db, ns, ns))
	}
	for _, cmd := range commands {
		switch cmd[0] {
		case "watch", "dashboard":
			continue // they run until interrupted
		}
		_, help, _ := c.run("", append(append([]string{}, cmd...), "--help")...)
		_, example, _ := strings.Cut(help, "Example:\n  ")
		example, _, _ = strings.Cut(example, "\n")
		args := strings.Fields(example)[1:]
		if slices.Contains(args, "--dsn") {
			continue // names a server of its own
		}
		if i := slices.Index(args, ">"); i >= 0 {
			args = args[:i]
		}
		if code, _, errs := c.run("", args...); code != exitOK {
			t.Errorf("the example %q: exit %d, %s", example, code, errs)
		}
	}
}

// TestDashboardCommand serves the dashboard on a free port until
// interrupted; its api/state shows a namespace that has a leader.
func TestDashboardCommand(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	c := newCLI(t)
	if code, _, errs := c.run("", "migrate", "up", "--dsn", dsn); code != exitOK {
		t.Fatalf("migrate up: %s", errs)
	}
	db := testdb.OpenDSN(t, dsn)
	ns := testdb.Namespace(t)
	leader, _ := leading(t, startCandidate(t, db, ns, "alpha"))
	p := c.start("dashboard", "--dsn", dsn, "--listen", "127.0.0.1:0")
	var url string
	waitFor(t, 20*time.Second, "the dashboard's address", func() bool {
		line := p.out.String()
		i, j := strings.Index(line, "http://"), strings.Index(line, " (Ctrl-C")
		if i < 0 || j < i {
			return false
		}
		url = line[i:j]
		return true
	})
	resp, err := http.Get(url + "api/state")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Leader    *struct {
				ID uuid.UUID `json:"id"`
			} `json:"leader"`
		} `json:"namespaces"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(st.Namespaces) != 1 || st.Namespaces[0].Namespace != ns ||
		st.Namespaces[0].Leader == nil || st.Namespaces[0].Leader.ID != leader.ID() {
		t.Errorf("api/state: %s %+v %v", resp.Status, st, err)
	}
	if code := p.interrupt(t); code != exitOK {
		t.Errorf("dashboard interrupted: exit %d, %s", code, p.errOut.String())
	}
}
