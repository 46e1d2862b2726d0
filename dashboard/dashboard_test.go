package dashboard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// elector runs an Elector labelled label in ns until the test ends.
func elector(t *testing.T, db *gorm.DB, ns, label string) *election.Elector {
	t.Helper()
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(time.Second), election.WithLabel(label),
		election.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
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
// terms, byte for byte, also for a namespace full of markup; the page
// carries the CSRF token and a strict content security policy.
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
		if len(n.Candidates) != 1 || !n.Candidates[0].Leader || len(n.History) < 1 || n.History[0].EndedAt != nil {
			t.Errorf("candidates %+v, history %+v", n.Candidates, n.History)
		}
		if st.Resign {
			t.Error("resign enabled by default")
		}
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") ||
			!strings.Contains(string(page), `name="csrf-token"`) || strings.Contains(string(page), "<script>alert") {
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

// TestResign: POST /api/resign is refused unless WithResign, from another
// origin, or without the page's token; with all three it vacates the seat
// and the term advances.
func TestResign(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ns := testdb.Namespace(t)
		a := elector(t, db, ns, "alpha")
		waitUntil(t, "leader", a.IsLeader)
		term := a.Lease().Term
		post := func(srv *httptest.Server, origin, token string) int {
			req, _ := http.NewRequest("POST", srv.URL+"/api/resign", strings.NewReader(`{"namespace":"`+ns+`"}`))
			req.Header.Set("Content-Type", "application/json")
			if origin != "" {
				req.Header.Set("Origin", origin)
			}
			if token != "" {
				req.Header.Set("X-CSRF-Token", token)
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
		if code := post(srvRO, srvRO.URL, "x"); code != http.StatusForbidden {
			t.Errorf("read-only dashboard: %d", code)
		}
		h, err := dashboard.New(db, dashboard.WithResign(), dashboard.WithNamespaces(ns))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		token := csrfToken(t, srv.URL)
		if code := post(srv, "http://evil.example", token); code != http.StatusForbidden {
			t.Errorf("cross-origin: %d", code)
		}
		if code := post(srv, srv.URL, ""); code != http.StatusForbidden {
			t.Errorf("no token: %d", code)
		}
		if code := post(srv, srv.URL, "wrong"); code != http.StatusForbidden {
			t.Errorf("wrong token: %d", code)
		}
		if l := a.Lease(); l.Term != term {
			t.Fatalf("a refused request changed the term: %+v", l)
		}
		if code := post(srv, srv.URL, token); code != http.StatusOK {
			t.Fatalf("same origin with the token: %d", code)
		}
		waitUntil(t, "a new term", func() bool {
			n := find(getState(t, srv.URL), ns)
			return n != nil && n.Leader != nil && n.Leader.Term > term
		})
		n := find(getState(t, srv.URL), ns)
		if len(n.History) < 2 || n.History[1].Term != term || n.History[1].EndReason != string(election.EndVacated) {
			t.Errorf("history after resign: %+v", n.History)
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
// a new term in the timeline within a few seconds, without reloading. With
// SQLELECT_SCREENSHOT=1 it saves docs/dashboard.png.
func TestBrowser(t *testing.T) {
	b := startBrowser(t, 412, 915)
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ns := evil + testdb.Namespace(t)
		plain := "billing.reports." + testdb.Namespace(t)
		a := elector(t, db, ns, "alpha")
		waitUntil(t, "leader", a.IsLeader)
		elector(t, db, ns, "beta")
		p := elector(t, db, plain, "gamma")
		waitUntil(t, "leader", p.IsLeader)
		term := a.Lease().Term
		h, err := dashboard.New(db, dashboard.WithNamespaces(ns, plain), dashboard.WithRefresh(200*time.Millisecond), dashboard.WithResign())
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
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
		if d := b.eventsNamed("Page.javascriptDialogOpening"); len(d) > 0 {
			t.Errorf("the page opened %d dialog(s): %s", len(d), d[0].Params)
		}
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
