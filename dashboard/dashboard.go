// Package dashboard serves a live web page of the elections in a database,
// made for fleets of a thousand namespaces as much as for a handful:
//
//   - a summary: how many namespaces, how many led and without a leader,
//     the leadership changes of the last hour and how the terms ended
//     (handoffs, expiries, operators' vacates);
//   - the fleet's timeline of the last hour: for each process, how many
//     seats it led minute by minute, and the terms that ended, by how;
//   - a table of the namespaces, filtered by name, by leader or to those
//     without a leader, sorted by any column and paged by the server:
//     leader, term, lease left (counting down by the database clock),
//     candidates, and the namespace's terms of the last hour as bars;
//   - the processes, with how many seats each leads, so that balance shows
//     at a glance (a click filters the table to a process's seats);
//   - a namespace's detail: its leader, candidates, history and timeline.
//
// The page polls a JSON endpoint, so it updates without reloading; its
// assets are embedded, so it works offline. One refresh costs the database
// three statements (five with a namespace's detail open), whatever the
// number of namespaces: the fleet reads of package election (ListSeats,
// ListRecentTerms, ListProcesses).
//
// Mount the handler in an admin server of your own:
//
//	h, err := dashboard.New(db)
//	if err != nil { ... }
//	mux.Handle("/elections/", http.StripPrefix("/elections", h))
//
// or run `sqlelect dashboard --listen 127.0.0.1:8080`.
//
// Routes, relative to where the handler is mounted:
//
//	GET  /            the page
//	GET  /api/state   the state as JSON (see State), for the query in its parameters (see ParseQuery)
//	POST /api/resign  end the term the page showed; only with WithResign
//
// The page is read-only unless WithResign is given. Resigning then takes a
// same-origin POST carrying the page's CSRF token, and nothing else: the
// handler has no authentication of its own. Whoever can load the page can
// vacate seats, so serve it only to trusted operators (on a loopback or
// admin-only address, or behind your own authentication).
//
// Every name from the database goes into the page as text, never as HTML.
// Database errors are logged (WithLogger), never sent to the browser.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
)

//go:embed assets
var assets embed.FS

// Option configures the handler.
type Option func(*config) error

type config struct {
	schema     string
	namespaces []string
	history    int
	refresh    time.Duration
	resign     bool
	timeout    time.Duration
	log        *slog.Logger
}

// WithSchema reads the tables of a PostgreSQL schema (see
// election.WithSchema).
func WithSchema(name string) Option {
	return func(c *config) error { c.schema = name; return nil }
}

// WithNamespaces limits the page to these namespaces; by default it shows
// every namespace in the tables, including those that appear later. The
// page then counts processes and candidates over these namespaces only,
// from every live candidate (ListAllCandidates in place of ListProcesses).
func WithNamespaces(ns ...string) Option {
	return func(c *config) error {
		if len(ns) == 0 {
			return errors.New("dashboard: WithNamespaces: no namespace")
		}
		c.namespaces = slices.Clone(ns)
		return nil
	}
}

// WithHistory sets how many recent terms a namespace's detail lists
// (default 10, at most 100).
func WithHistory(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 100 {
			return fmt.Errorf("dashboard: WithHistory: %d, want 1 to 100", n)
		}
		c.history = n
		return nil
	}
}

// WithRefresh sets how often the page polls /api/state (default 1s, at
// least 100ms).
func WithRefresh(d time.Duration) Option {
	return func(c *config) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("dashboard: WithRefresh: %v, want at least 100ms", d)
		}
		c.refresh = d
		return nil
	}
}

// WithResign shows a resign button on each led namespace and accepts POST
// /api/resign, which ends the term the page showed, as
// election.Election.VacateLease does: if the seat has moved on since, it
// changes nothing (the history records an ended term as vacated). The
// request must come from the page itself: the same origin (Sec-Fetch-Site,
// else Origin), with the CSRF token the page carries. That is all the
// protection there is: the handler does not authenticate anyone, so a
// dashboard with WithResign must be reachable only by trusted operators.
func WithResign() Option {
	return func(c *config) error { c.resign = true; return nil }
}

// WithLogger sets where the handler logs: the database errors it does not
// show to the browser, and the seats vacated through it (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("dashboard: WithLogger: nil logger")
		}
		c.log = l
		return nil
	}
}

// Handler is the dashboard's http.Handler.
type Handler struct {
	db   *gorm.DB
	cfg  config
	csrf string
	page *template.Template
	mux  *http.ServeMux

	mu        sync.Mutex
	base      *election.Election // the first, checked; the others derive from it
	elections map[string]*election.Election
}

// New returns the dashboard of the elections in db. It checks the options
// and the database's settings as election.New does.
func New(db *gorm.DB, opts ...Option) (*Handler, error) {
	c := config{history: 10, refresh: time.Second, timeout: 10 * time.Second, log: slog.Default()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("dashboard: nil Option")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if db == nil {
		return nil, errors.New("dashboard: nil database")
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, err
	}
	h := &Handler{db: db, cfg: c, csrf: hex.EncodeToString(tok[:]), page: page, elections: map[string]*election.Election{}}
	// One Election to check the settings and list namespaces.
	if _, err := h.election(context.Background(), election.DefaultNamespace); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.servePage)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /api/state", h.serveState)
	mux.HandleFunc("POST /api/resign", h.serveResign)
	h.mux = mux
	return h, nil
}

// ServeHTTP serves the page, its assets and the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	h.mux.ServeHTTP(w, r)
}

// election returns the Election of ns: the first one made checks the
// database (election.NewContext), the others derive from it.
func (h *Handler) election(ctx context.Context, ns string) (*election.Election, error) {
	h.mu.Lock()
	e, base := h.elections[ns], h.base
	h.mu.Unlock()
	if e != nil {
		return e, nil
	}
	var err error
	if base != nil {
		e, err = base.ForNamespace(ns)
	} else {
		opts := []election.Option{election.WithNamespace(ns), election.WithLogger(h.cfg.log)}
		if h.cfg.schema != "" {
			opts = append(opts, election.WithSchema(h.cfg.schema))
		}
		ctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
		defer cancel()
		e, err = election.NewContext(ctx, h.db, opts...)
	}
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.elections) > 10000 {
		clear(h.elections)
	}
	h.elections[ns] = e
	if h.base == nil {
		h.base = e
	}
	return e, nil
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = h.page.Execute(w, map[string]any{
		"CSRF":      h.csrf,
		"Resign":    h.cfg.resign,
		"RefreshMS": h.cfg.refresh.Milliseconds(),
	})
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	q, err := ParseQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	st, err := h.ReadState(r.Context(), q)
	if err != nil {
		// The error's text may name tables, hosts or users: it goes to the
		// log, and the browser gets what it can act on.
		msg := "reading the elections failed (the server's log says why)"
		if errors.Is(err, election.ErrNotMigrated) {
			msg = "the election tables are missing: run `sqlelect migrate up`"
		}
		h.cfg.log.Error("dashboard: reading the elections", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": msg})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// serveResign ends a term: enabled by WithResign, from the same origin,
// with the page's CSRF token in X-CSRF-Token, and a JSON body
// {"namespace": "...", "leader": "<uuid>", "term": N} naming the lease the
// page showed. It answers 200 with {"namespace", "vacated": true, "leader",
// "term"}, 409 when the seat has moved on (nothing changed), 400 for a bad
// request, 403 when refused, 503 when the database failed.
func (h *Handler) serveResign(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.resign {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "resigning is not enabled"})
		return
	}
	if !sameOrigin(r) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused"})
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-CSRF-Token")), []byte(h.csrf)) != 1 {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing or wrong CSRF token"})
		return
	}
	var body struct {
		Namespace string    `json:"namespace"`
		Leader    uuid.UUID `json:"leader"`
		Term      int64     `json:"term"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil ||
		body.Namespace == "" || body.Leader == uuid.Nil || body.Term <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"namespace": "...", "leader": "<uuid>", "term": N}`})
		return
	}
	e, err := h.election(r.Context(), body.Namespace)
	if errors.Is(err, election.ErrInvalidNamespace) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid namespace"})
		return
	}
	if err != nil {
		h.cfg.log.Error("dashboard: resign", "namespace", body.Namespace, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "vacating failed (the server's log says why)"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	want := election.Lease{Namespace: body.Namespace, Leader: body.Leader, Term: body.Term}
	l, err := e.VacateLease(ctx, want)
	if errors.Is(err, election.ErrNotLeader) {
		writeJSON(w, http.StatusConflict, map[string]any{"namespace": body.Namespace, "vacated": false,
			"error": fmt.Sprintf("the seat moved on: term %d is over; nothing changed", body.Term)})
		return
	}
	if err != nil {
		h.cfg.log.Error("dashboard: resign", "namespace", body.Namespace, "term", body.Term, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "vacating failed (the server's log says why)"})
		return
	}
	h.cfg.log.Info("dashboard: seat vacated by an operator", "namespace", body.Namespace, "leader", l.Leader, "term", l.Term,
		"remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"namespace": body.Namespace, "vacated": true, "leader": l.Leader, "term": l.Term})
}

// sameOrigin reports whether r comes from a page of this host: the browser's
// Sec-Fetch-Site, else the Origin header, must say so.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
