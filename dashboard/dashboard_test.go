package dashboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/dashboard"
	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
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

func getState(t *testing.T, url string) dashboard.State {
	t.Helper()
	resp, err := http.Get(url + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("api/state: %s %s", resp.Status, b)
	}
	var st dashboard.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func find(st dashboard.State, ns string) *dashboard.Namespace {
	for i := range st.Namespaces {
		if st.Namespaces[i].Name == ns {
			return &st.Namespaces[i]
		}
	}
	return nil
}

// TestState: /api/state shows each namespace's leader, candidates and
// terms, byte for byte, also for a namespace full of markup, which the JSON
// escapes; the lease's full window; the page carries the CSRF token and a
// strict content security policy.
func TestState(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ns := evil + testdb.Namespace(t)
		a := elector(t, db, ns, "alpha")
		waitUntil(t, "leader", a.IsLeader)
		h, err := dashboard.New(db, dashboard.WithNamespaces(ns))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		st := getState(t, srv.URL)
		n := find(st, ns)
		if n == nil || n.Leader == nil {
			t.Fatalf("state: %+v", st)
		}
		if n.Leader.ID != a.ID() || n.Leader.Label != "alpha" || n.Leader.Term < 1 || n.Leader.LeaseRemainingMS <= 0 || n.Leader.LeaseRemainingMS > 1000 {
			t.Errorf("leader %+v", n.Leader)
		}
		// The Elector's expiry window is 1s; the window is read from its
		// candidate row, whose two times may come from two readings of the
		// clock in one statement.
		if w := n.Leader.LeaseWindowMS; w < 990 || w > 1000 {
			t.Errorf("lease_window_ms %d, want the Elector's expiry, 1000", w)
		}
		if len(n.Candidates) != 1 || !n.Candidates[0].Leader || len(n.History) < 1 || n.History[0].EndedAt != nil {
			t.Errorf("candidates %+v, history %+v", n.Candidates, n.History)
		}
		if st.Resign {
			t.Error("resign enabled by default")
		}
		// The raw JSON carries the markup escaped, so that even a client
		// that pasted it into HTML would not run it.
		resp, err := http.Get(srv.URL + "/api/state")
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
				n := find(getState(t, srv.URL), ns)
				return n != nil && n.Leader != nil && n.Leader.Term > term
			})
			n := find(getState(t, srv.URL), ns)
			if len(n.History) < 2 || n.History[1].Term != term || n.History[1].EndReason != string(election.EndVacated) {
				t.Errorf("history after resign: %+v", n.History)
			}
			// The term that was just ended cannot be ended again.
			next := n.Leader.Term
			if code := post(srv, headers, term); code != http.StatusConflict {
				t.Errorf("resigning term %d again: %d, want 409", term, code)
			}
			if n := find(getState(t, srv.URL), ns); n.Leader == nil || n.Leader.Term != next {
				t.Errorf("a refused resign changed the seat: %+v", n.Leader)
			}
			term = next
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

// TestBrowser loads the page in headless Chromium at a phone's width: it
// shows the leader of a namespace whose name is markup, as text, without
// running it; when the leader hands over, the page shows the new leader and
// a new term in the timeline within a few seconds, without reloading. Then
// the operator clicks the resign button (WithResign), confirms the dialog
// naming the leader and its term, and the page shows the other candidate
// leading in a later term, and the term ended as vacated. With
// SQLELECT_SCREENSHOT=1 it saves docs/dashboard.png.
func TestBrowser(t *testing.T) {
	b := startBrowser(t, 412, 915)
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ns := evil + testdb.Namespace(t)
		plain := "billing.reports." + testdb.Namespace(t)
		a := elector(t, db, ns, "alpha")
		waitUntil(t, "leader", a.IsLeader)
		beta := elector(t, db, ns, "beta")
		p := elector(t, db, plain, "gamma")
		waitUntil(t, "leader", p.IsLeader)
		term := a.Observed().Term
		h, err := dashboard.New(db, dashboard.WithNamespaces(ns, plain), dashboard.WithRefresh(200*time.Millisecond), dashboard.WithResign(),
			dashboard.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		dialogs := len(b.eventsNamed("Page.javascriptDialogOpening")) // of the earlier subtests
		b.call(t, b.session, "Page.navigate", map[string]any{"url": srv.URL + "/"}, nil)

		nsJS, _ := json.Marshal(ns)
		card := `[...document.querySelectorAll("section.ns")].find(s => s.dataset.namespace === ` + string(nsJS) + `)`
		b.waitEval(t, 10*time.Second, "the namespace's card with its leader",
			`(() => { const c = `+card+`; return !!c && c.querySelector("h2").textContent === `+string(nsJS)+
				` && c.querySelector(".leader .who").textContent === "alpha"; })()`)
		var scripts, imgs int
		b.eval(t, `document.querySelectorAll("script").length`, &scripts)
		b.eval(t, `document.querySelectorAll("main img").length`, &imgs)
		if scripts != 1 || imgs != 0 {
			t.Errorf("the markup in the namespace became elements: %d scripts, %d images", scripts, imgs)
		}
		b.waitEval(t, 5*time.Second, "a lease countdown", `(() => { const c = `+card+`; return /lease [0-9.]+ (ms|s) left/.test(c.querySelector(".countdown").textContent); })()`)

		// The leader hands over; the page follows without a reload.
		b.eval(t, `(window.__marker = 1)`, new(int))
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Resign(rctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b.waitEval(t, 5*time.Second, "the new leader and its term in the timeline",
			`(() => { const c = `+card+`; return !!c && c.querySelector(".leader .who").textContent === "beta" && `+
				`!!c.querySelector('.timeline li[data-term="`+strconv.FormatInt(term+1, 10)+`"]'); })()`)
		t.Logf("%s: the page showed the new leader %v after Resign returned", db.Dialector.Name(), time.Since(start).Round(time.Millisecond))
		var marker int
		b.eval(t, `window.__marker || 0`, &marker)
		if marker != 1 {
			t.Error("the page reloaded")
		}
		if d := b.eventsNamed("Page.javascriptDialogOpening")[dialogs:]; len(d) > 0 {
			t.Fatalf("the page opened %d dialog(s): %s", len(d), d[0].Params)
		}

		// The operator resigns beta's term from the page. The click runs
		// after Runtime.evaluate returns: the confirmation dialog blocks
		// the page until it is answered.
		waitUntil(t, "beta leads", beta.IsLeader)
		bl := beta.Observed()
		b.waitEval(t, 5*time.Second, "beta's term on the card",
			`(() => { const c = `+card+`; return !!c && c.querySelector(".leader .term").textContent === "term `+strconv.FormatInt(bl.Term, 10)+`"; })()`)
		b.eval(t, `(() => { const c = `+card+`; setTimeout(() => c.querySelector("button.resign").click(), 0); return true; })()`, new(bool))
		var dialog struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		waitUntil(t, "the confirmation dialog", func() bool { return len(b.eventsNamed("Page.javascriptDialogOpening")) > dialogs })
		if err := json.Unmarshal(b.eventsNamed("Page.javascriptDialogOpening")[dialogs].Params, &dialog); err != nil {
			t.Fatal(err)
		}
		if dialog.Type != "confirm" || !strings.Contains(dialog.Message, "[beta]") ||
			!strings.Contains(dialog.Message, "term "+strconv.FormatInt(bl.Term, 10)) {
			t.Errorf("the confirmation %s %q does not name beta and term %d", dialog.Type, dialog.Message, bl.Term)
		}
		b.call(t, b.session, "Page.handleJavaScriptDialog", map[string]any{"accept": true}, nil)
		b.waitEval(t, 10*time.Second, "alpha leading in a later term, and beta's term vacated",
			`(() => { const c = `+card+`; if (!c) return false; `+
				`const t = c.querySelector(".leader .term"); const li = c.querySelector('.timeline li[data-term="`+strconv.FormatInt(bl.Term, 10)+`"] .reason'); `+
				`return c.querySelector(".leader .who").textContent === "alpha" && !!t && parseInt(t.textContent.slice(5), 10) > `+strconv.FormatInt(bl.Term, 10)+
				` && !!li && li.textContent === "(vacated)"; })()`)
		var statusLine string
		b.eval(t, `document.getElementById("status").textContent`, &statusLine)
		if !strings.Contains(statusLine, "vacated") {
			t.Errorf("the status line does not report the resign: %q", statusLine)
		}
		// beta stops leading at its next round.
		waitUntil(t, "beta to step down", func() bool { return !beta.IsLeader() })
		if os.Getenv("SQLELECT_SCREENSHOT") == "1" && db.Dialector.Name() == "sqlite" {
			var shot struct {
				Data string `json:"data"`
			}
			b.call(t, b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot)
			png, err := base64.StdEncoding.DecodeString(shot.Data)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
}
