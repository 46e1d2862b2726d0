package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// The operator's mistakes and expectations, each through the binary: a
// mistyped path or namespace, the resign button on every interface, the
// version, a huge or invalid argument, a duplicated error line, watch's
// columns.

// readCommands are the commands that read an existing database, with the
// arguments they need; ns stands for a namespace.
func readCommands(dsn, ns string) [][]string {
	return [][]string{
		{"status", "--dsn", dsn},
		{"status", "--dsn", dsn, ns},
		{"candidates", "--dsn", dsn},
		{"history", "--dsn", dsn, ns},
		{"resign", "--dsn", dsn, "--yes", ns},
		{"watch", "--dsn", dsn},
		{"dashboard", "--dsn", dsn, "--listen", "127.0.0.1:0"},
		{"migrate", "status", "--dsn", dsn},
	}
}

// TestMissingDatabase: every read command refuses a database that does not
// exist, says which, and creates nothing: a SQLite path in each form
// session.Open takes, a database the server does not have. Only migrate
// up creates one.
func TestMissingDatabase(t *testing.T) {
	c := newCLI(t)
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			if tg.Name != "sqlite" {
				// A database name nobody created: refused, and still absent.
				fresh := testdb.Fresh(t, tg)
				missing := strings.Replace(fresh, "sqlelect_t_", "sqlelect_nx_", 1)
				for _, args := range readCommands(missing, "scheduler") {
					code, out, errs := c.run("", args...)
					if code != exitError || !strings.Contains(errs, "sqlelect_nx_") || out != "" {
						t.Errorf("%v: exit %d, %q %q; want exit 1 naming the database", args[:1], code, out, errs)
					}
				}
				if code, _, errs := c.run("", "status", "--dsn", missing); code != exitError {
					t.Errorf("the missing database answered after the read commands: %s", errs)
				}
				return
			}
			dir := t.TempDir()
			for _, form := range []struct{ dsn, path string }{
				{"sqlite:" + filepath.Join(dir, "typo.db"), filepath.Join(dir, "typo.db")},
				{filepath.Join(dir, "typo.sqlite3"), filepath.Join(dir, "typo.sqlite3")},
				{"file:" + filepath.Join(dir, "typo file.db") + "?_busy_timeout=100", filepath.Join(dir, "typo file.db")},
				{"file://" + filepath.Join(dir, "typo%20uri.db"), filepath.Join(dir, "typo uri.db")},
			} {
				for _, args := range readCommands(form.dsn, "scheduler") {
					code, out, errs := c.run("", args...)
					if code != exitError || !strings.Contains(errs, fmt.Sprintf("the SQLite database %q does not exist", form.path)) ||
						!strings.Contains(errs, "only `sqlelect migrate up` creates") || strings.Contains(errs, "run `sqlelect migrate up`") || out != "" {
						t.Errorf("%v on %s: exit %d, %q %q; want exit 1 naming %s", args[:2], form.dsn, code, out, errs, form.path)
					}
				}
				if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
					t.Fatalf("read commands on %s created %q", form.dsn, left)
				}
			}
			// A relative path is named as given and in full.
			rel := newCLI(t)
			rel.env = append(rel.env, "SQLELECT_DSN=sqlite:typo.db")
			cmd := exec.Command(bin.path, "status")
			cmd.Env, cmd.Dir = rel.env, dir
			out, _ := cmd.CombinedOutput()
			if want := fmt.Sprintf("%q (%q) does not exist", "typo.db", filepath.Join(dir, "typo.db")); !strings.Contains(string(out), want) {
				t.Errorf("status on a relative path: %q, want %q", out, want)
			}
			// migrate up creates the database; then the read commands work.
			dsn := "sqlite:" + filepath.Join(dir, "typo.db")
			if out := c.ok("migrate", "up", "--dsn", dsn); !strings.HasPrefix(out, "applied versions 1 (") {
				t.Errorf("migrate up on a new path: %q", out)
			}
			if out := c.ok("status", "--dsn", dsn); out != "no namespaces yet\n" {
				t.Errorf("status after migrate up: %q", out)
			}
		})
	}
}

// swap returns s with its last two bytes swapped: a typo.
func swap(s string) string {
	b := []byte(s)
	b[len(b)-1], b[len(b)-2] = b[len(b)-2], b[len(b)-1]
	return string(b)
}

// TestNoSuchNamespace: a namespace nobody used is an error (exit 1, "no
// such namespace", the closest known name suggested) for every command
// that names one, and shows as empty with --allow-unknown.
func TestNoSuchNamespace(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			c := newCLI(t)
			dsn, db := testdb.Shared(t, tg)
			ns := testdb.Namespace(t) + ".scheduler"
			leading(t, startCandidate(t, db, ns, "alpha"))
			typo := swap(ns)
			suggestion := fmt.Sprintf("no such namespace %q (did you mean %q", typo, ns)
			for _, args := range [][]string{
				{"status", "--dsn", dsn, ns, typo},
				{"candidates", "--dsn", dsn, typo},
				{"history", "--dsn", dsn, typo},
				{"resign", "--dsn", dsn, "--yes", typo},
				{"watch", "--dsn", dsn, typo},
			} {
				code, out, errs := c.run("", args...)
				if code != exitError || !strings.Contains(errs, suggestion) || out != "" {
					t.Errorf("%v: exit %d, %q %q; want exit 1 and %q", args[:1], code, out, errs, suggestion)
				}
			}
			// Nothing near: no suggestion.
			far := "zz-" + testdb.Namespace(t)
			if code, _, errs := c.run("", "history", "--dsn", dsn, far); code != exitError ||
				!strings.Contains(errs, fmt.Sprintf("no such namespace %q\n", far)) {
				t.Errorf("history of a name unlike any other: exit %d, %q", code, errs)
			}
			// Lenient: shown as empty.
			out := c.ok("status", "--dsn", dsn, "--allow-unknown", typo)
			if rows := table(t, out, "NAMESPACE", "LEADER", "IDENTITY", "TERM", "LEASE LEFT", "CANDIDATES"); len(rows) != 1 ||
				rows[0]["NAMESPACE"] != typo || rows[0]["LEADER"] != "(none)" {
				t.Errorf("status --allow-unknown: %q", out)
			}
			if out := c.ok("candidates", "--dsn", dsn, "--allow-unknown", typo); !strings.Contains(out, fmt.Sprintf("no live candidates in %q", typo)) {
				t.Errorf("candidates --allow-unknown: %q", out)
			}
			if out := c.ok("history", "--dsn", dsn, "--allow-unknown", typo); !strings.Contains(out, fmt.Sprintf("no terms in %q yet", typo)) {
				t.Errorf("history --allow-unknown: %q", out)
			}
			if out := c.ok("resign", "--dsn", dsn, "--yes", "--allow-unknown", typo); !strings.Contains(out, "no leader; nothing changed") {
				t.Errorf("resign --allow-unknown: %q", out)
			}
			w := c.start("watch", "--dsn", dsn, "--allow-unknown", typo)
			waitFor(t, 20*time.Second, "watch --allow-unknown to start", func() bool { return strings.Contains(w.errOut.String(), "watch:") })
			if code := w.interrupt(t); code != exitOK || w.out.String() != "" {
				t.Errorf("watch --allow-unknown: exit %d, %q %q", code, w.out.String(), w.errOut.String())
			}
		})
	}
}

// TestBadArguments: a namespace over the length limit is refused before
// anything is read or printed, quoting a short prefix of it; a timeout
// that is not positive is a usage error, not "context deadline exceeded".
func TestBadArguments(t *testing.T) {
	huge := strings.Repeat("x", 100<<10)
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			c := newCLI(t)
			dsn, _ := testdb.Shared(t, tg)
			for _, args := range [][]string{
				{"status", "--dsn", dsn, "ok", huge},
				{"candidates", "--dsn", dsn, huge},
				{"history", "--dsn", dsn, huge},
				{"resign", "--dsn", dsn, "--yes", huge},
				{"watch", "--dsn", dsn, huge},
				{"status", "--dsn", dsn, "\xff"},
			} {
				code, out, errs := c.run("", args...)
				if code != exitUsage || out != "" || !strings.Contains(errs, "invalid namespace") || len(errs) > 8<<10 ||
					strings.Contains(errs, "NAMESPACE  ") {
					t.Errorf("%v with a bad namespace: exit %d, stdout %d bytes, stderr %d bytes: %.300q", args[:1], code, len(out), len(errs), errs)
				}
				if len(args[len(args)-1]) == len(huge) && !strings.Contains(errs, `namespace "`+strings.Repeat("x", 40)+`"… (102400 bytes)`) {
					t.Errorf("%v: the namespace is not quoted by a short prefix: %.300q", args[:1], errs)
				}
			}
			for _, args := range [][]string{
				{"status", "--timeout", "0s"},
				{"status", "--timeout=-1s"},
				{"candidates", "--timeout", "0"},
				{"history", "--timeout", "0s", "x"},
				{"resign", "--timeout", "0s", "x"},
				{"watch", "--timeout", "0s"},
				{"dashboard", "--timeout", "0s"},
				{"migrate", "up", "--timeout", "0s"},
				{"migrate", "status", "--timeout", "0s"},
			} {
				code, out, errs := c.run("", append(args, "--dsn", dsn)...)
				if code != exitUsage || out != "" || !strings.Contains(errs, "--timeout must be positive") || strings.Contains(errs, "deadline") {
					t.Errorf("%v: exit %d, %q %q; want a usage error", args, code, out, errs)
				}
			}
		})
	}
}

// TestErrorLinesOnce: an unreachable database is reported with each line
// once: PostgreSQL's driver tries the address with TLS and without, and
// reports the same dial error for each.
func TestErrorLinesOnce(t *testing.T) {
	c := newCLI(t)
	for _, dsn := range []string{
		"postgres://u:pw@127.0.0.1:1/db",
		"postgres://u:pw@127.0.0.1:1/db?sslmode=prefer&connect_timeout=2",
		"host=127.0.0.1 port=1 user=u password=pw dbname=db",
		"mysql://root:pw@tcp(127.0.0.1:1)/test?timeout=1s",
	} {
		code, _, errs := c.run("", "status", "--dsn", dsn)
		if code != exitError || !strings.Contains(errs, "127.0.0.1:1") {
			t.Errorf("%s: exit %d, %q", dsn, code, errs)
		}
		seen := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
			if key := strings.TrimSpace(line); seen[key] {
				t.Errorf("%s: the line %q is printed twice:\n%s", dsn, key, errs)
			} else {
				seen[key] = true
			}
		}
		if strings.HasPrefix(dsn, "postgres") && strings.Count(errs, "dial error") != 1 {
			t.Errorf("%s: the dial error %d times:\n%s", dsn, strings.Count(errs, "dial error"), errs)
		}
	}
}

// TestDashboardAddress: on every interface, the dashboard prints URLs a
// browser can open (not 0.0.0.0 or [::]), which serve it, and with
// --allow-resign a warning that anyone who reaches it can vacate seats; on
// a loopback address, no warning.
func TestDashboardAddress(t *testing.T) {
	host, _ := os.Hostname()
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			c := newCLI(t)
			dsn, _ := testdb.Shared(t, tg)
			for _, l := range []struct {
				listen, local string
				resign, warn  bool
			}{
				// Go listens on both families for 0.0.0.0 where it can.
				{"0.0.0.0:0", `^http://(127\.0\.0\.1|localhost):\d+/$`, true, true},
				{"[::]:0", `^http://localhost:\d+/$`, true, true},
				{":0", `^http://localhost:\d+/$`, false, false},
				{"127.0.0.1:0", `^http://127\.0\.0\.1:\d+/$`, true, false},
			} {
				args := []string{"dashboard", "--dsn", dsn, "--listen", l.listen}
				if l.resign {
					args = append(args, "--allow-resign")
				}
				p := c.start(args...)
				var url string
				waitFor(t, 20*time.Second, "the dashboard's address", func() bool {
					m := regexp.MustCompile(`serving the dashboard on (http://\S+/) \(Ctrl-C to stop\)\n`).FindStringSubmatch(p.out.String())
					if m != nil {
						url = m[1]
					}
					return m != nil
				})
				if !regexp.MustCompile(l.local).MatchString(url) {
					t.Errorf("--listen %s: %q, want %s", l.listen, url, l.local)
				}
				resp, err := http.Get(url + "api/state")
				if err != nil {
					t.Errorf("--listen %s: GET %s: %v", l.listen, url, err)
				} else {
					var st struct {
						Resign bool `json:"resign"`
					}
					err = json.NewDecoder(resp.Body).Decode(&st)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || st.Resign != l.resign {
						t.Errorf("--listen %s: api/state %s %v, resign %v", l.listen, resp.Status, err, st.Resign)
					}
				}
				wildcard := l.listen != "127.0.0.1:0"
				if other := fmt.Sprintf("from other hosts, http://%s:", host); strings.Contains(p.out.String(), other) != wildcard {
					t.Errorf("--listen %s: %q; want the URL by the host's name: %v", l.listen, p.out.String(), wildcard)
				}
				if code := p.interrupt(t); code != exitOK {
					t.Errorf("--listen %s: exit %d, %s", l.listen, code, p.errOut.String())
				}
				warned := strings.Contains(p.errOut.String(), "warning: --allow-resign on") &&
					strings.Contains(p.errOut.String(), "not a loopback address: anyone who can reach it can vacate seats")
				if warned != l.warn {
					t.Errorf("--listen %s --allow-resign=%v: stderr %q; want a warning: %v", l.listen, l.resign, p.errOut.String(), l.warn)
				}
				if strings.Contains(p.out.String(), "0.0.0.0") || strings.Contains(p.out.String(), "[::]") {
					t.Errorf("--listen %s: prints an address no browser opens: %q", l.listen, p.out.String())
				}
			}
		})
	}
}

// TestVersion: `sqlelect version` and `--version` report what the build
// recorded (go version -m reads the same), and a release build's
// -X main.version in place of the module version.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	c := newCLI(t)
	stamped := filepath.Join(t.TempDir(), "sqlelect-release")
	// -buildvcs=auto: record the revision wherever the checkout allows,
	// whatever GOFLAGS says.
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", "-X main.version=v9.8.7-test", "-o", stamped, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, b := range []struct{ path, version string }{{bin.path, "(devel)"}, {stamped, "v9.8.7-test"}} {
		info, err := exec.Command("go", "version", "-m", b.path).Output()
		if err != nil {
			t.Fatal(err)
		}
		recorded := map[string]string{}
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs."):
				k, v, _ := strings.Cut(f[1], "=")
				recorded[k] = v
			case len(f) >= 2 && strings.HasSuffix(f[0], ":"):
				recorded["go"] = f[1]
			}
		}
		cmd := exec.Command(b.path, "version", "--json")
		cmd.Env = c.env
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		var got buildInfo
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("version --json: %q: %v", out, err)
		}
		want := buildInfo{Version: b.version, Module: "github.com/sqlelect/sqlelect", Revision: recorded["vcs.revision"], Time: recorded["vcs.time"],
			Modified: recorded["vcs.modified"] == "true", Go: recorded["go"], Platform: got.Platform}
		if got != want || !strings.Contains(got.Platform, "/") {
			t.Errorf("%s version --json: %+v, want %+v", filepath.Base(b.path), got, want)
		}
		for _, args := range [][]string{{"version"}, {"--version"}} {
			cmd := exec.Command(b.path, args...)
			cmd.Env = c.env
			text, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			lines := []string{"sqlelect " + b.version + "\n", "  go:       " + got.Go + " " + got.Platform + "\n"}
			if got.Revision != "" {
				rev := got.Revision
				if got.Modified {
					rev += " (modified)"
				}
				lines = append(lines, "  revision: "+rev+"\n", "  time:     "+got.Time+"\n")
			} else {
				lines = append(lines, "  revision: (not recorded")
			}
			for _, l := range lines {
				if !strings.Contains(string(text), l) {
					t.Errorf("%s %v: %q, want %q", filepath.Base(b.path), args, text, l)
				}
			}
		}
	}
}

// TestWatchColumns: watch's text lines keep their columns whatever the
// length of the namespaces' names: what happened starts at the same column
// on every line.
func TestWatchColumns(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			c := newCLI(t)
			dsn, db := testdb.Shared(t, tg)
			short := "s" + testdb.Namespace(t)[len(testdb.Namespace(t))-6:]
			long := testdb.Namespace(t) + ".a-namespace-name-far-longer-than-twenty-characters.élan"
			for _, ns := range []string{short, long} {
				leading(t, startCandidate(t, db, ns, "alpha"))
			}
			p := c.start("watch", "--dsn", dsn, "--interval", "100ms", short, long)
			waitFor(t, 20*time.Second, "both namespaces' leaders", func() bool { return strings.Count(p.out.String(), "\n") >= 2 })
			late := startCandidate(t, db, long, "beta")
			waitFor(t, 20*time.Second, "the candidate joining", func() bool { return strings.Contains(p.out.String(), late.ID().String()) })
			if code := p.interrupt(t); code != exitOK {
				t.Fatalf("watch: exit %d, %s", code, p.errOut.String())
			}
			col := -1
			for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
				m := watchLine.FindStringSubmatchIndex(line)
				if m == nil {
					t.Fatalf("not a watch line: %q", line)
				}
				at := utf8.RuneCountInString(line[:m[6]])
				if col < 0 {
					col = at
				}
				if at != col {
					t.Errorf("watch's columns move:\n%s", p.out.String())
					break
				}
			}
			if want := 12 + 2 + utf8.RuneCountInString(long) + 2; col != want {
				t.Errorf("what happened starts at column %d, want %d:\n%s", col, want, p.out.String())
			}
		})
	}
}
