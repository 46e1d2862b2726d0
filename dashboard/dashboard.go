// Package dashboard serves a live web page of the elections in a database:
// every namespace with its leader (identity, term, a countdown of the lease
// by the database clock), its live candidates, and a timeline of its recent
// terms with how each ended. The page polls a JSON endpoint, so it updates
// without reloading; its assets are embedded, so it works offline.
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
//	GET  /api/state   every namespace as JSON (see State)
//	POST /api/resign  end the term the page showed; only with WithResign
//
// The page is read-only unless WithResign is given. Resigning then takes a
// same-origin POST carrying the page's CSRF token, and nothing else: the
// handler has no authentication of its own. Whoever can load the page can
// vacate seats, so serve it only to trusted operators (on a loopback or
// admin-only address, or behind your own authentication).
//
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
	"github.com/sqlelect/sqlelect/internal/dialect"
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
// every namespace in the tables, including those that appear later.
func WithNamespaces(ns ...string) Option {
	return func(c *config) error {
		if len(ns) == 0 {
			return errors.New("dashboard: WithNamespaces: no namespace")
		}
		c.namespaces = slices.Clone(ns)
		return nil
	}
}

// WithHistory sets how many recent terms of each namespace the timeline
// shows (default 10, at most 100).
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
	d    dialect.Dialect
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
	d, err := dialect.For(db)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, err
	}
	h := &Handler{db: db, d: d, cfg: c, csrf: hex.EncodeToString(tok[:]), page: page, elections: map[string]*election.Election{}}
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

// State is what GET /api/state returns.
type State struct {
	// Now is the database clock when the state was read (UTC).
	Now time.Time `json:"now"`
	// RefreshMS is how often the page polls, in milliseconds.
	RefreshMS int64 `json:"refresh_ms"`
	// Resign tells whether POST /api/resign is enabled.
	Resign bool `json:"resign"`
	// Namespaces are sorted by name.
	Namespaces []Namespace `json:"namespaces"`
}

// Namespace is one namespace in State.
type Namespace struct {
	Name string `json:"namespace"`
	// Leader is nil when the seat is vacant.
	Leader *Leader `json:"leader"`
	// Candidates are the live candidates, sorted by id.
	Candidates []Candidate `json:"candidates"`
	// History is the recent terms, newest first.
	History []Term `json:"history"`
}

// Leader is a namespace's current lease and its holder.
type Leader struct {
	ID               uuid.UUID `json:"id"`
	Term             int64     `json:"term"`
	Hostname         string    `json:"hostname"`
	PID              int       `json:"pid"`
	Label            string    `json:"label"`
	AcquiredAt       time.Time `json:"acquired_at"`
	ExpiresAt        time.Time `json:"expires_at"`
	LeaseRemainingMS int64     `json:"lease_remaining_ms"` // by the database clock
	// LeaseWindowMS is the lease's full length as each renewal sets it: the
	// leader's expiry window (its Election's WithExpire), read from its
	// candidate row (expires_at minus last_heartbeat_at). Zero when the
	// leader has no live candidate row.
	LeaseWindowMS int64 `json:"lease_window_ms"`
}

// Candidate is a live candidate.
type Candidate struct {
	ID              uuid.UUID `json:"id"`
	Hostname        string    `json:"hostname"`
	PID             int       `json:"pid"`
	Label           string    `json:"label"`
	Leader          bool      `json:"leader"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

// Term is one term of the timeline.
type Term struct {
	Term       int64      `json:"term"`
	Leader     uuid.UUID  `json:"leader"`
	Hostname   string     `json:"hostname"`
	PID        int        `json:"pid"`
	Label      string     `json:"label"`
	AcquiredAt time.Time  `json:"acquired_at"`
	EndedAt    *time.Time `json:"ended_at"`   // null while running
	EndReason  string     `json:"end_reason"` // "" while running
}

// ReadState reads what /api/state serves.
func (h *Handler) ReadState(ctx context.Context) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
	defer cancel()
	nss := h.cfg.namespaces
	if nss == nil {
		e, err := h.election(ctx, election.DefaultNamespace)
		if err != nil {
			return State{}, err
		}
		if nss, err = e.ListNamespaces(ctx); err != nil {
			return State{}, err
		}
	}
	var now dialect.Time
	if err := h.db.WithContext(ctx).Raw(h.d.Statements().Clock).Row().Scan(&now); err != nil {
		return State{}, err
	}
	st := State{Now: now.Time.UTC(), RefreshMS: h.cfg.refresh.Milliseconds(), Resign: h.cfg.resign, Namespaces: []Namespace{}}
	for _, ns := range slices.Sorted(slices.Values(nss)) {
		e, err := h.election(ctx, ns)
		if err != nil {
			return State{}, err
		}
		info, err := e.LeaderInfo(ctx)
		if err != nil {
			return State{}, err
		}
		cands, err := e.Candidates(ctx)
		if err != nil {
			return State{}, err
		}
		terms, err := e.History(ctx, h.cfg.history)
		if err != nil {
			return State{}, err
		}
		n := Namespace{Name: ns, Candidates: []Candidate{}, History: []Term{}}
		if l := info.Lease; !l.Vacant() {
			n.Leader = &Leader{ID: l.Leader, Term: l.Term, Hostname: info.Identity.Hostname, PID: info.Identity.PID, Label: info.Identity.Label,
				AcquiredAt: l.AcquiredAt.UTC(), ExpiresAt: l.ExpiresAt.UTC(), LeaseRemainingMS: max(l.ExpiresAt.Sub(now.Time), 0).Milliseconds()}
		}
		for _, c := range cands {
			if c.Leader && n.Leader != nil && c.ID == n.Leader.ID {
				n.Leader.LeaseWindowMS = max(c.ExpiresAt.Sub(c.LastHeartbeatAt), 0).Milliseconds()
			}
			n.Candidates = append(n.Candidates, Candidate{ID: c.ID, Hostname: c.Identity.Hostname, PID: c.Identity.PID, Label: c.Identity.Label,
				Leader: c.Leader, LastHeartbeatAt: c.LastHeartbeatAt.UTC()})
		}
		for _, t := range terms {
			tr := Term{Term: t.Term, Leader: t.Leader, Hostname: t.Identity.Hostname, PID: t.Identity.PID, Label: t.Identity.Label,
				AcquiredAt: t.AcquiredAt.UTC(), EndReason: string(t.EndReason)}
			if t.Ended() {
				end := t.EndedAt.UTC()
				tr.EndedAt = &end
			}
			n.History = append(n.History, tr)
		}
		st.Namespaces = append(st.Namespaces, n)
	}
	return st, nil
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	st, err := h.ReadState(r.Context())
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
