package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/dashboard"
	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// evil is a namespace that would run script if the page treated it as HTML.
const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`

// quiet is a logger that discards.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// elector runs an Elector labelled label in ns until the test ends.
func elector(t *testing.T, db *gorm.DB, ns, label string) *election.Elector {
	t.Helper()
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(time.Second), election.WithLabel(label),
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
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return el
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// getState reads api/state with the query given (url-encoded, may be
// empty).
func getState(t *testing.T, base, query string) dashboard.State {
	t.Helper()
	st, _ := getStateRaw(t, base, query)
	return st
}

// getStateRaw is getState, with the size of the answer's body.
func getStateRaw(t *testing.T, base, query string) (dashboard.State, int) {
	t.Helper()
	resp, err := http.Get(base + "/api/state?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("api/state?%s: %s %s", query, resp.Status, raw)
	}
	var st dashboard.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st, len(raw)
}

// row returns the table row of ns on the state's page, or nil.
func row(st dashboard.State, ns string) *dashboard.Namespace {
	for i := range st.Namespaces {
		if st.Namespaces[i].Name == ns {
			return &st.Namespaces[i]
		}
	}
	return nil
}

// names are the namespaces of the state's page, in order.
func names(st dashboard.State) []string {
	var out []string
	for _, n := range st.Namespaces {
		out = append(out, n.Name)
	}
	return out
}

// TestState: /api/state shows each namespace's leader, candidates and
// terms, byte for byte, also for a namespace full of markup, which the JSON
// escapes; the summary, the processes and the fleet's timeline; a
// namespace's detail; the lease's full window; the page carries the CSRF
// token and a strict content security policy.
func TestState(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ns := evil + testdb.Namespace(t)
		idle := "idle." + testdb.Namespace(t) // never used
		a := elector(t, db, ns, "alpha")
		waitUntil(t, "leader", a.IsLeader)
		h, err := dashboard.New(db, dashboard.WithNamespaces(ns, idle))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		st := getState(t, srv.URL, "ns="+url.QueryEscape(ns))
		n := row(st, ns)
		if n == nil || n.Leader == nil || len(st.Namespaces) != 2 {
			t.Fatalf("state: %+v", st)
		}
		host, _ := os.Hostname()
		key := election.Identity{Hostname: host, PID: os.Getpid(), Label: "alpha"}.String()
		if n.Leader.ID != a.ID() || n.Leader.Label != "alpha" || n.Leader.Key != key || n.Leader.Term < 1 ||
			n.Leader.LeaseRemainingMS <= 0 || n.Leader.LeaseRemainingMS > 1000 || n.Candidates != 1 {
			t.Errorf("leader %+v, candidates %d", n.Leader, n.Candidates)
		}
		// The Elector's expiry window is 1s; the window is read from its
		// candidate row, whose two times may come from two readings of the
		// clock in one statement.
		if w := n.Leader.LeaseWindowMS; w < 990 || w > 1000 {
			t.Errorf("lease_window_ms %d, want the Elector's expiry, 1000", w)
		}
		if len(n.Terms) < 1 || n.Terms[len(n.Terms)-1].EndedAt != nil || n.Terms[len(n.Terms)-1].Key != key {
			t.Errorf("terms %+v", n.Terms)
		}
		if i := row(st, idle); i == nil || i.Leader != nil || i.Candidates != 0 || len(i.Terms) != 0 {
			t.Errorf("a namespace nobody used: %+v", i)
		}
		if s := st.Summary; s.Namespaces != 2 || s.Led != 1 || s.Unled != 1 || s.Changes < 1 || s.Processes != 1 || s.Candidates != 1 {
			t.Errorf("summary %+v", s)
		}
		if len(st.Processes) != 1 || st.Processes[0].Key != key || st.Processes[0].Leads != 1 || st.Processes[0].Candidacies != 1 {
			t.Errorf("processes %+v", st.Processes)
		}
		if len(st.Fleet.Lanes) != 1 || st.Fleet.Lanes[0].Key != key || st.Fleet.Lanes[0].Seats[60] != 1 || len(st.Fleet.Handoffs) != 61 ||
			st.WindowMS != time.Hour.Milliseconds() {
			t.Errorf("fleet %+v", st.Fleet)
		}
		if d := st.Detail; d == nil || d.Name != ns || d.Missing || d.Leader == nil || d.Leader.ID != a.ID() ||
			len(d.Candidates) != 1 || !d.Candidates[0].Leader || len(d.History) < 1 || d.History[0].EndedAt != nil || len(d.Terms) < 1 {
			t.Errorf("detail %+v", st.Detail)
		}
		if st.Resign {
			t.Error("resign enabled by default")
		}
		if d := getState(t, srv.URL, "ns=nobody."+testdb.Namespace(t)).Detail; d == nil || !d.Missing {
			t.Errorf("the detail of an unknown namespace: %+v", d)
		}
		// The raw JSON carries the markup escaped, so that even a client
		// that pasted it into HTML would not run it.
		resp, err := http.Get(srv.URL + "/api/state?ns=" + url.QueryEscape(ns))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(raw), "<script>") || !strings.Contains(string(raw), `\u003cscript\u003e`) {
			t.Errorf("api/state does not escape the namespace's markup: %s", raw)
		}
		resp, err = http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") ||
			!strings.Contains(string(page), `name="csrf-token"`) {
			t.Errorf("page: %s %q", resp.Header, page)
		}
		for _, p := range []string{"/static/app.js", "/static/style.css"} {
			resp, err := http.Get(srv.URL + p)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %v %v", p, resp.Status, err)
			}
			resp.Body.Close()
		}
	})
}

// TestQuery: the table's filters (by name, substring or pattern; without
// a leader; by leader), orders and pages, worked out by the server; and
// the parameters it refuses.
func TestQuery(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		prefix := testdb.Namespace(t) + "."
		var nss []string
		p1 := uuid.New()
		p2 := uuid.New()
		e1, err := election.New(db, election.WithLabel("p1"), election.WithExpire(time.Minute), election.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		e2, err := election.New(db, election.WithLabel("p2"), election.WithExpire(time.Minute), election.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		// 12 namespaces: 0-4 led by p1 (term 1), 5-8 led by p2 (terms 1-2:
		// one handoff each for 5 and 6), 9-11 with a candidate of p1 only.
		for i := range 12 {
			ns := fmt.Sprintf("%sns-%02d", prefix, i)
			nss = append(nss, ns)
			x1, _ := e1.ForNamespace(ns)
			x2, _ := e2.ForNamespace(ns)
			switch {
			case i < 5:
				if _, err := x1.Elect(ctx, p1); err != nil {
					t.Fatal(err)
				}
			case i < 9:
				if i < 7 {
					if _, err := x1.Elect(ctx, p1); err != nil {
						t.Fatal(err)
					}
					if err := x1.Resign(ctx, p1); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := x2.Elect(ctx, p2); err != nil {
					t.Fatal(err)
				}
			default:
				if err := x1.RegisterCandidate(ctx, p1); err != nil {
					t.Fatal(err)
				}
			}
		}
		h, err := dashboard.New(db, dashboard.WithNamespaces(nss...), dashboard.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		sfx := func(idx ...int) []string {
			var out []string
			for _, i := range idx {
				out = append(out, nss[i])
			}
			return out
		}
		host, _ := os.Hostname()
		key1 := election.Identity{Hostname: host, PID: os.Getpid(), Label: "p1"}.String()
		for _, c := range []struct {
			query string
			want  []string
			total int
		}{
			{"", sfx(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 12},
			{"per=5", sfx(0, 1, 2, 3, 4), 12},
			{"per=5&page=3", sfx(10, 11), 12},
			{"per=5&page=9", nil, 12},
			{"q=NS-1", sfx(10, 11), 2},                                                // a substring, whatever the case
			{"q=" + url.QueryEscape("*ns-0?"), sfx(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), 10}, // a pattern
			{"q=" + url.QueryEscape("ns-0?"), nil, 0},                                 // a pattern matches the whole name
			{"unled=1", sfx(9, 10, 11), 3},
			{"leader=p2", sfx(5, 6, 7, 8), 4},
			{"leader=" + url.QueryEscape(key1), sfx(0, 1, 2, 3, 4), 5},
			{"leader=" + p2.String()[:8], sfx(5, 6, 7, 8), 4},
			{"leader=" + p2.String()[:7], nil, 0}, // too short a prefix
			{"sort=term&desc=1&per=4", sfx(5, 6, 0, 1), 12},
			{"sort=term&per=4", sfx(9, 10, 11, 0), 12}, // never led (term 0) first
			{"sort=leader&per=6", sfx(0, 1, 2, 3, 4, 5), 12},
			{"sort=leader&desc=1&per=5", sfx(5, 6, 7, 8, 0), 12}, // ties by name, vacant seats last
			{"sort=leader&desc=1&page=3&per=5", sfx(10, 11), 12},
			{"sort=candidates&desc=1&per=3", sfx(5, 6, 0), 12},
			{"sort=lease&per=3", sfx(9, 10, 11), 12},
		} {
			st := getState(t, srv.URL, c.query)
			if got := names(st); !slices.Equal(got, c.want) || st.Page.Total != c.total {
				t.Errorf("?%s: %q (of %d), want %q (of %d)", c.query, got, st.Page.Total, c.want, c.total)
			}
			if st.Summary.Namespaces != 12 || st.Summary.Led != 9 || st.Summary.Unled != 3 || st.Summary.Changes != 11 || st.Summary.Handoffs != 2 {
				t.Errorf("?%s: the summary %+v is not of every namespace", c.query, st.Summary)
			}
		}
		st := getState(t, srv.URL, "per=5&page=2&sort=candidates&desc=1&q=ns&leader=p1")
		if p := st.Page; p.Number != 2 || p.PerPage != 5 || p.Pages != 1 || p.Total != 5 || p.Sort != "candidates" || !p.Desc || p.Match != "ns" || p.Leader != "p1" {
			t.Errorf("page %+v", p)
		}
		if n := row(getState(t, srv.URL, ""), nss[5]); n == nil || n.Leader == nil || n.Leader.Term != 2 || len(n.Terms) != 2 ||
			n.Terms[0].EndReason != string(election.EndResigned) || n.Terms[0].Key != key1 {
			t.Errorf("a namespace handed over: %+v", n)
		}
		if n := row(getState(t, srv.URL, "unled=1"), nss[9]); n == nil || n.VacantSince != nil || n.Candidates != 1 {
			t.Errorf("a namespace never led: %+v", n)
		}
		for _, bad := range []string{"sort=bogus", "per=0", "per=501", "page=-1", "unled=maybe", "unled=1&leader=p1",
			"ns=" + strings.Repeat("n", election.MaxNamespaceLen+1), "q=" + strings.Repeat("x", 2000)} {
			resp, err := http.Get(srv.URL + "/api/state?" + bad)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "error") || len(body) > 300 {
				t.Errorf("?%.60s: %s %s, want 400 with a short error", bad, resp.Status, body)
			}
		}
	})
}

// countedHandler serves the dashboard of a new, migrated database (so that
// no other test's namespaces are in it) on a pool that counts its
// statements, and returns another pool on it, to write the elections.
func countedHandler(t *testing.T, tg testdb.Target, opts ...dashboard.Option) (fleetServer, *gorm.DB) {
	t.Helper()
	dsn := testdb.Fresh(t, tg)
	c := &rtcount.Counter{}
	counted, err := session.OpenWrapped(dsn, c.Wrap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testdb.Close(counted) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, counted); err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(counted, append([]dashboard.Option{dashboard.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return fleetServer{srv: srv, counter: c, counted: counted}, testdb.OpenDSN(t, dsn)
}

// fleetServer is a dashboard on a counted pool.
type fleetServer struct {
	srv     *httptest.Server
	counter *rtcount.Counter
	counted *gorm.DB // the dashboard's pool
}

// statements is the number of statements counted: every driver call but
// preparing a statement (SQLite's prepared-statement cache prepares each
// on its first use) and pinging a connection (pgx checks one that was idle).
func statements(c rtcount.Counts) int64 {
	return c.Total() - c[rtcount.Prepare] - c[rtcount.Ping]
}

// TestStatementsPerRefresh: one refresh of the page costs three statements
// (five with a namespace's detail), whether there are 3 namespaces or 60:
// the fleet reads, never a read per namespace.
func TestStatementsPerRefresh(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			fs, db := countedHandler(t, tg)
			srv, counter := fs.srv, fs.counter
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e, err := election.New(db, election.WithLogger(quiet), election.WithLabel("w"))
			if err != nil {
				t.Fatal(err)
			}
			made := 0
			grow := func(n int) {
				for ; made < n; made++ {
					x, _ := e.ForNamespace(fmt.Sprintf("ns-%03d", made))
					if _, err := x.Elect(ctx, uuid.New()); err != nil {
						t.Fatal(err)
					}
					if err := x.RegisterCandidate(ctx, uuid.New()); err != nil {
						t.Fatal(err)
					}
				}
			}
			measure := func(query string) int64 {
				getState(t, srv.URL, query) // prepares and warms
				before := counter.Snapshot()
				st := getState(t, srv.URL, query)
				if st.Summary.Namespaces != made {
					t.Fatalf("%d namespaces shown, %d made", st.Summary.Namespaces, made)
				}
				return statements(counter.Snapshot().Sub(before))
			}
			for _, n := range []int{3, 60} {
				grow(n)
				if got := measure(""); got != 3 {
					t.Errorf("%d namespaces: a refresh ran %d statements, want 3", n, got)
				}
				if got := measure("ns=ns-001&sort=lease&q=ns&per=10&page=2"); got != 5 {
					t.Errorf("%d namespaces: a refresh with a detail ran %d statements, want 5", n, got)
				}
			}
		})
	}
}

// TestStateError: when the database fails, /api/state answers 503 with a
// message that does not carry the database's error, which goes to the log.
func TestStateError(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		var logged lockedBuffer
		h, err := dashboard.New(db, dashboard.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
		if err != nil {
			t.Fatal(err)
		}
		testdb.Close(db) // every later call fails: "sql: database is closed"
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/api/state")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "closed") ||
			!strings.Contains(string(body), "log") {
			t.Errorf("api/state with the database closed: %s %s", resp.Status, body)
		}
		if !strings.Contains(logged.String(), "database is closed") {
			t.Errorf("the error is not in the log: %q", logged.String())
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers and a reader.
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

// TestResign: POST /api/resign is refused unless WithResign, from another
// origin or site (by Origin or by Sec-Fetch-Site), or without the page's
// token; with all three it ends the term named, and the term advances; a
// term that is over changes nothing (409).
func TestResign(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ns := testdb.Namespace(t)
		a := elector(t, db, ns, "alpha")
		waitUntil(t, "leader", a.IsLeader)
		lease := a.Observed()
		post := func(srv *httptest.Server, headers map[string]string, term int64) int {
			t.Helper()
			body := fmt.Sprintf(`{"namespace":%q,"leader":%q,"term":%d}`, ns, a.ID(), term)
			req, _ := http.NewRequest("POST", srv.URL+"/api/resign", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		ro, err := dashboard.New(db, dashboard.WithNamespaces(ns))
		if err != nil {
			t.Fatal(err)
		}
		srvRO := httptest.NewServer(ro)
		defer srvRO.Close()
		if code := post(srvRO, map[string]string{"Origin": srvRO.URL, "X-CSRF-Token": "x"}, lease.Term); code != http.StatusForbidden {
			t.Errorf("read-only dashboard: %d", code)
		}
		h, err := dashboard.New(db, dashboard.WithResign(), dashboard.WithNamespaces(ns), dashboard.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		token := csrfToken(t, srv.URL)
		for _, c := range []struct {
			what    string
			headers map[string]string
		}{
			{"another origin", map[string]string{"Origin": "http://evil.example", "X-CSRF-Token": token}},
			{"no origin at all", map[string]string{"X-CSRF-Token": token}},
			// The browser's Sec-Fetch-Site decides when it is there, even
			// against an Origin that names the server.
			{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": srv.URL, "X-CSRF-Token": token}},
			{"Sec-Fetch-Site same-site", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": srv.URL, "X-CSRF-Token": token}},
			{"Sec-Fetch-Site none", map[string]string{"Sec-Fetch-Site": "none", "X-CSRF-Token": token}},
			{"no token", map[string]string{"Origin": srv.URL}},
			{"a wrong token", map[string]string{"Sec-Fetch-Site": "same-origin", "X-CSRF-Token": "wrong"}},
		} {
			if code := post(srv, c.headers, lease.Term); code != http.StatusForbidden {
				t.Errorf("%s: %d, want 403", c.what, code)
			}
		}
		if code := post(srv, map[string]string{"Sec-Fetch-Site": "same-origin", "X-CSRF-Token": token}, lease.Term+1); code != http.StatusConflict {
			t.Errorf("a term not begun: %d, want 409", code)
		}
		if l := a.Observed(); l.Term != lease.Term {
			t.Fatalf("a refused request changed the term: %+v", l)
		}
		detail := "ns=" + url.QueryEscape(ns)
		// Same origin by Origin, then by Sec-Fetch-Site alone.
		term := lease.Term
		for _, headers := range []map[string]string{
			{"Origin": srv.URL, "X-CSRF-Token": token},
			{"Sec-Fetch-Site": "same-origin", "X-CSRF-Token": token},
		} {
			if code := post(srv, headers, term); code != http.StatusOK {
				t.Fatalf("%v: %d, want 200", headers, code)
			}
			waitUntil(t, "a new term", func() bool {
				d := getState(t, srv.URL, detail).Detail
				return d.Leader != nil && d.Leader.Term > term
			})
			d := getState(t, srv.URL, detail).Detail
			if len(d.History) < 2 || d.History[1].Term != term || d.History[1].EndReason != string(election.EndVacated) {
				t.Errorf("history after resign: %+v", d.History)
			}
			if n := getState(t, srv.URL, "").Namespaces[0]; n.Terms[len(n.Terms)-2].EndReason != string(election.EndVacated) {
				t.Errorf("the row's timeline after resign: %+v", n.Terms)
			}
			// The term that was just ended cannot be ended again.
			next := d.Leader.Term
			if code := post(srv, headers, term); code != http.StatusConflict {
				t.Errorf("resigning term %d again: %d, want 409", term, code)
			}
			if d := getState(t, srv.URL, detail).Detail; d.Leader == nil || d.Leader.Term != next {
				t.Errorf("a refused resign changed the seat: %+v", d.Leader)
			}
			term = next
		}
		if s := getState(t, srv.URL, "").Summary; s.Vacates != 2 {
			t.Errorf("summary after two vacates: %+v", s)
		}
	})
}

func csrfToken(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	const marker = `name="csrf-token" content="`
	i := strings.Index(string(b), marker)
	if i < 0 {
		t.Fatalf("no CSRF token in the page")
	}
	rest := string(b)[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}
