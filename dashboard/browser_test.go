package dashboard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestBrowser loads the page in headless Chromium at a phone's width, with
// a namespace's detail open: it shows the leader of a namespace whose name
// is markup, as text, without running it; when the leader hands over, the
// page shows the new leader and a new term in the history within a few
// seconds, without reloading. The table filters by name as the operator
// types, sorts by a column, and a click on a process shows its seats. Then
// the operator clicks the resign button (WithResign), confirms the dialog
// naming the leader and its term, and the page shows the other candidate
// leading in a later term, and the term ended as vacated.
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
		b.call(t, b.session, "Page.navigate", map[string]any{"url": srv.URL + "/#ns=" + url.QueryEscape(ns)}, nil)

		detail := `document.getElementById("detail")`
		b.waitEval(t, 10*time.Second, "the namespace's detail with its leader",
			`(() => { const d = `+detail+`; if (!d) return false; return !d.hidden && d.dataset.namespace === `+js(ns)+
				` && d.querySelector(".name")?.textContent === `+js(ns)+` && d.querySelector(".leader .who")?.textContent === "alpha"; })()`)
		rowOf := func(name string) string {
			return `[...document.querySelectorAll("#ns-table tbody tr")].find(r => r.dataset.namespace === ` + js(name) + `)`
		}
		b.waitEval(t, 5*time.Second, "both namespaces in the table, the markup as text",
			`(() => { const r = `+rowOf(ns)+`; return !!r && r.querySelector("a.ns-link")?.textContent === `+js(ns)+` && !!`+rowOf(plain)+`; })()`)
		var scripts, imgs int
		b.eval(t, `document.querySelectorAll("script").length`, &scripts)
		b.eval(t, `document.querySelectorAll("main img").length`, &imgs)
		if scripts != 1 || imgs != 0 {
			t.Errorf("the markup in the namespace became elements: %d scripts, %d images", scripts, imgs)
		}
		b.waitEval(t, 5*time.Second, "a lease countdown", `/lease [0-9.]+ (ms|s) left/.test(`+detail+`?.querySelector(".countdown")?.textContent)`)
		b.waitEval(t, 5*time.Second, "the summary", `document.querySelector('[data-stat="namespaces"] .n')?.textContent === "2"`)

		// The leader hands over; the page follows without a reload.
		b.eval(t, `(window.__marker = 1)`, new(int))
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Resign(rctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b.waitEval(t, 5*time.Second, "the new leader and its term in the history",
			`(() => { const d = `+detail+`; if (!d) return false; return d.querySelector(".leader .who")?.textContent === "beta" && `+
				`!!d.querySelector('.history tr[data-term="`+strconv.FormatInt(term+1, 10)+`"]') && `+
				`!!d.querySelector('.tl .tl-mark.handoff'); })()`)
		t.Logf("%s: the page showed the new leader %v after Resign returned", db.Dialector.Name(), time.Since(start).Round(time.Millisecond))
		var marker int
		b.eval(t, `window.__marker || 0`, &marker)
		if marker != 1 {
			t.Error("the page reloaded")
		}
		if d := b.eventsNamed("Page.javascriptDialogOpening")[dialogs:]; len(d) > 0 {
			t.Fatalf("the page opened %d dialog(s): %s", len(d), d[0].Params)
		}

		// The operator filters the table by name, sorts it, and picks a
		// process.
		b.eval(t, `(() => { const q = document.getElementById("q"); q.focus(); q.value = "BILLING.rep"; q.dispatchEvent(new Event("input")); return true; })()`, new(bool))
		b.waitEval(t, 5*time.Second, "the table filtered to the billing namespace",
			`(() => { const rows = document.querySelectorAll("#ns-table tbody tr"); return rows.length === 1 && rows[0].dataset.namespace === `+js(plain)+
				` && location.hash.includes("q=BILLING.rep"); })()`)
		b.eval(t, `(() => { document.getElementById("q").value = ""; document.getElementById("q").dispatchEvent(new Event("input")); `+
			`document.querySelector('#ns-table th[data-sort="term"] button').click(); return true; })()`, new(bool))
		b.waitEval(t, 5*time.Second, "the table sorted by term",
			`document.querySelector('#ns-table th[data-sort="term"]')?.getAttribute("aria-sort") === "ascending" && `+
				`document.querySelectorAll("#ns-table tbody tr").length === 2 && document.querySelector("#ns-table tbody tr")?.dataset?.namespace === `+js(plain))
		b.eval(t, `(() => { const r = [...document.querySelectorAll("#proc-table tbody tr")].find(r => r.textContent.includes("[gamma]")); r.querySelector("button").click(); return true; })()`, new(bool))
		b.waitEval(t, 5*time.Second, "the seats of gamma's process",
			`(() => { const rows = document.querySelectorAll("#ns-table tbody tr"); return rows.length === 1 && rows[0].dataset.namespace === `+js(plain)+
				` && !document.getElementById("leader-filter").hidden; })()`)
		b.eval(t, `(document.querySelector("#leader-filter .clear").click(), true)`, new(bool))

		// The operator resigns beta's term from the page. The click runs
		// after Runtime.evaluate returns: the confirmation dialog blocks
		// the page until it is answered.
		waitUntil(t, "beta leads", beta.IsLeader)
		bl := beta.Observed()
		b.waitEval(t, 5*time.Second, "beta's term in the detail",
			detail+`?.querySelector(".leader .term")?.textContent === "term `+strconv.FormatInt(bl.Term, 10)+`"`)
		b.eval(t, `(() => { setTimeout(() => `+detail+`?.querySelector("button.resign").click(), 0); return true; })()`, new(bool))
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
			`(() => { const d = `+detail+`; if (!d) return false; const t = d.querySelector(".leader .term"); `+
				`const r = d.querySelector('.history tr[data-term="`+strconv.FormatInt(bl.Term, 10)+`"] .reason'); `+
				`return d.querySelector(".leader .who")?.textContent === "alpha" && !!t && parseInt(t.textContent.slice(5), 10) > `+strconv.FormatInt(bl.Term, 10)+
				` && !!r && r.textContent === "(vacated)" && !!d.querySelector(".tl .tl-mark.vacate"); })()`)
		var statusLine string
		b.eval(t, `document.getElementById("status").textContent`, &statusLine)
		if !strings.Contains(statusLine, "vacated") {
			t.Errorf("the status line does not report the resign: %q", statusLine)
		}
		// beta stops leading at its next round.
		waitUntil(t, "beta to step down", func() bool { return !beta.IsLeader() })
	})
}

// fleetSize is the size of TestBrowserFleet: SQLELECT_DASHBOARD_FLEET as
// NAMESPACESxPROCESSES (e.g. 1000x32), by default 100x8.
func fleetSize(t *testing.T) (namespaces, processes int) {
	t.Helper()
	s := os.Getenv("SQLELECT_DASHBOARD_FLEET")
	if s == "" {
		return 100, 8
	}
	a, b, ok := strings.Cut(s, "x")
	n, err1 := strconv.Atoi(a)
	p, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || p < 1 {
		t.Fatalf("SQLELECT_DASHBOARD_FLEET=%q: want NAMESPACESxPROCESSES, e.g. 1000x32", s)
	}
	return n, p
}

// TestBrowserFleet: the page over a fleet on PostgreSQL, SQLELECT_DASHBOARD_
// FLEET namespaces (default 100x8; the measured figures in
// docs/performance.md are at 1000x32) with a Group per process, each a
// candidate in every namespace with Balance. It measures what one refresh
// costs (statements, the state's size) and how long the page takes to show
// the table, and checks that the page shows the fleet as it is: the
// summary, a page of the table, the processes with the seats each leads,
// the page after it, a process's seats and a namespace's detail. With
// SQLELECT_SCREENSHOT=1 it saves docs/dashboard.png.
func TestBrowserFleet(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	n, procs := fleetSize(t)
	b := startBrowser(t, 1280, 1000)
	fs, db := countedHandler(t, tg, dashboard.WithRefresh(2*time.Second))
	srv, counter := fs.srv, fs.counter
	nss := make([]string, n)
	for i := range nss {
		nss[i] = fmt.Sprintf("tenant-%04d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setup := time.Now()
	groups := make([]*election.Group, procs)
	done := make(chan error, procs)
	for i := range groups {
		g, err := election.NewGroup(ctx, db, uuid.New(), election.GroupConfig{Namespaces: nss, Balance: true, Interval: 5 * time.Second},
			election.WithExpire(30*time.Second), election.WithLabel(fmt.Sprintf("worker-%02d", i)), election.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = g
		go func() { done <- g.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range groups {
			<-done
		}
	}()
	// Wait for the fleet to settle: every seat led, every candidate live,
	// and leadership balanced, so that no more handoffs come.
	share := (n + procs - 1) / procs
	var st dashboard.State
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st = getState(t, srv.URL, "")
		most := 0
		for _, p := range st.Processes {
			most = max(most, p.Leads)
		}
		if st.Summary.Led == n && st.Summary.Candidates == n*procs && len(st.Processes) == procs && most <= share {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %+v", time.Since(setup), st.Summary)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d namespaces x %d processes: every seat led, every candidate live, balanced after %v", n, procs, time.Since(setup).Round(time.Second))

	// One refresh, timed (the median of five) and counted on the
	// dashboard's own pool.
	var took []time.Duration
	for range 5 {
		start := time.Now()
		getState(t, srv.URL, "")
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	before := counter.Snapshot()
	st, size := getStateRaw(t, srv.URL, "")
	stmts := statements(counter.Snapshot().Sub(before))
	before = counter.Snapshot()
	_, detailSize := getStateRaw(t, srv.URL, "ns="+nss[1])
	detailStmts := statements(counter.Snapshot().Sub(before))
	if stmts != 3 || detailStmts != 5 {
		t.Errorf("a refresh ran %d statements (%d with a detail), want 3 (5)", stmts, detailStmts)
	}
	if len(st.Namespaces) != dashboard.DefaultPerPage && n >= dashboard.DefaultPerPage || st.Page.Total != n {
		t.Errorf("page %+v with %d rows", st.Page, len(st.Namespaces))
	}
	if size > 256<<10 {
		t.Errorf("the state of one page is %d bytes: the page must not carry the whole fleet", size)
	}
	leads := 0
	for _, p := range st.Processes {
		leads += p.Leads
	}
	if len(st.Processes) != procs || leads != n {
		t.Errorf("%d processes leading %d seats, want %d leading %d", len(st.Processes), leads, procs, n)
	}

	// Beside it, in the same run: what a refresh cost when the page read
	// each namespace on its own (LeaderInfo, Candidates and History(10)
	// per namespace, after ListNamespaces and the clock), and the size of
	// the JSON that carried every namespace with its candidates and terms.
	perNS, perNSStmts, perNSSize := perNamespaceRefresh(t, fs)
	t.Logf("BASELINE %dx%d on %s: reading each namespace on its own: %d statements, %v, %d bytes of JSON",
		n, procs, tg.Name, perNSStmts, perNS.Round(time.Millisecond), perNSSize)

	// The page: loaded until it shows the table's first page.
	b.call(t, b.session, "Page.navigate", map[string]any{"url": srv.URL + "/"}, nil)
	b.waitEval(t, 30*time.Second, "the first page of the table",
		`document.querySelectorAll("#ns-table tbody tr").length === `+strconv.Itoa(min(n, dashboard.DefaultPerPage))+
			` && document.querySelectorAll("#proc-table tbody tr").length === `+strconv.Itoa(procs))
	var timing struct {
		FirstRender float64 `json:"first"`
		Loaded      float64 `json:"loaded"`
		State       float64 `json:"state"`
		Transfer    float64 `json:"transfer"`
	}
	b.eval(t, `(() => { const nav = performance.getEntriesByType("navigation")[0]; `+
		`const s = performance.getEntriesByType("resource").find(r => r.name.includes("api/state")); `+
		`return {first: +document.body.dataset.firstRenderMs, loaded: nav.loadEventEnd, state: s ? s.duration : -1, transfer: s ? s.encodedBodySize : -1}; })()`, &timing)
	var summary string
	b.eval(t, `document.getElementById("summary").textContent`, &summary)
	for _, want := range []string{strconv.Itoa(n) + "namespaces", strconv.Itoa(n) + "led", "0without a leader", strconv.Itoa(procs) + "processes"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary %q does not say %q", summary, want)
		}
	}
	t.Logf("FLEET %dx%d on %s: %d statements per refresh (%d with a namespace's detail); state %d bytes (%d with a detail), "+
		"served in %v (median of 5); page shown %.0f ms after navigation (load event %.0f ms; its api/state %.0f ms, %.0f bytes)",
		n, procs, tg.Name, stmts, detailStmts, size, detailSize, took[2].Round(time.Millisecond), timing.FirstRender, timing.Loaded,
		timing.State, timing.Transfer)

	// The next page, then a process's seats, then a namespace's detail.
	b.eval(t, `(document.querySelector("#pager .next").click(), true)`, new(bool))
	if n > dashboard.DefaultPerPage {
		b.waitEval(t, 10*time.Second, "the second page",
			`document.querySelector("#ns-table tbody tr")?.dataset?.namespace === `+js(nss[dashboard.DefaultPerPage])+
				` && document.querySelector("#pager .info")?.textContent?.startsWith("page 2 of ")`)
	}
	proc := st.Processes[procs/2]
	b.eval(t, `(() => { const r = [...document.querySelectorAll("#proc-table tbody tr")].find(r => r.dataset.key === `+js(proc.Key)+`); r.querySelector("button").click(); return true; })()`, new(bool))
	want := getState(t, srv.URL, "per=500&leader="+url.QueryEscape(proc.Key))
	b.waitEval(t, 10*time.Second, "the seats of one process",
		`(() => { const rows = [...document.querySelectorAll("#ns-table tbody tr")]; return rows.length === `+strconv.Itoa(min(want.Page.Total, dashboard.DefaultPerPage))+
			` && rows.every(r => r.querySelector(".who")?.title?.startsWith(`+js(proc.Key)+`)); })()`)
	for _, p := range want.Processes {
		if p.Key == proc.Key && p.Leads != want.Page.Total {
			t.Errorf("the table shows %d seats of %s, which leads %d", want.Page.Total, proc.Key, p.Leads)
		}
	}
	first := names(want)[0]
	b.eval(t, `(() => { [...document.querySelectorAll("#ns-table a.ns-link")].find(a => a.textContent === `+js(first)+`).click(); return true; })()`, new(bool))
	b.waitEval(t, 10*time.Second, "the namespace's detail",
		`(() => { const d = document.getElementById("detail"); return !d.hidden && d.dataset.namespace === `+js(first)+
			` && d.querySelectorAll(".candidates li").length === `+strconv.Itoa(procs)+` && d.querySelector(".leader .who")?.textContent === `+js(proc.Label)+`; })()`)
	if os.Getenv("SQLELECT_SCREENSHOT") == "1" {
		b.eval(t, `(document.querySelector("#detail .close").click(), true)`, new(bool))
		b.eval(t, `(document.querySelector("#leader-filter .clear").click(), true)`, new(bool))
		b.waitEval(t, 10*time.Second, "the first page again", `document.getElementById("detail").hidden && document.getElementById("leader-filter").hidden`)
		var shot struct {
			Data string `json:"data"`
		}
		b.call(t, b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
		png, err := base64.StdEncoding.DecodeString(shot.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// perNamespaceRefresh reads, on the dashboard's counted pool, what one
// refresh read before the fleet reads: every namespace's leader,
// candidates and ten terms, one namespace after the other. It returns the
// time, the statements and the size of that data as JSON.
func perNamespaceRefresh(t *testing.T, fs fleetServer) (time.Duration, int64, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	counter := fs.counter
	e, err := election.New(fs.counted, election.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	type nsState struct {
		Namespace  string                   `json:"namespace"`
		Leader     election.LeaderInfo      `json:"leader"`
		Candidates []election.CandidateInfo `json:"candidates"`
		History    []election.TermRecord    `json:"history"`
	}
	before := counter.Snapshot()
	start := time.Now()
	nss, err := e.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Now(ctx); err != nil {
		t.Fatal(err)
	}
	var all []nsState
	for _, ns := range nss {
		x, err := e.ForNamespace(ns)
		if err != nil {
			t.Fatal(err)
		}
		st := nsState{Namespace: ns}
		if st.Leader, err = x.LeaderInfo(ctx); err != nil {
			t.Fatal(err)
		}
		if st.Candidates, err = x.Candidates(ctx); err != nil {
			t.Fatal(err)
		}
		if st.History, err = x.History(ctx, 10); err != nil {
			t.Fatal(err)
		}
		all = append(all, st)
	}
	took := time.Since(start)
	stmts := statements(counter.Snapshot().Sub(before))
	raw, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return took, stmts, len(raw)
}
