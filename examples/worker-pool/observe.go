package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// metrics is an election.Observer that keeps a few counters and serves them
// in Prometheus's text format, under the names the
// github.com/sqlelect/sqlelect/prometheus Collector uses. The example
// stays in the core module, which does not depend on Prometheus's client;
// a real program registers that Collector instead and gets all its
// metrics (tenure, durations, live candidates, ...).
type metrics struct {
	election.NopObserver
	mu        sync.Mutex
	leading   map[string]map[uuid.UUID]bool // namespace -> leading candidates
	elections map[[2]string]int             // namespace, outcome
	stops     map[[2]string]int             // namespace, reason
	errs      map[[2]string]int             // namespace, class
	wakes     map[[2]string]int             // namespace, source
}

func newMetrics() *metrics {
	return &metrics{leading: map[string]map[uuid.UUID]bool{}, elections: map[[2]string]int{},
		stops: map[[2]string]int{}, errs: map[[2]string]int{}, wakes: map[[2]string]int{}}
}

func (m *metrics) Attempt(a election.Attempt) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.elections[[2]string{a.Namespace, string(a.Outcome)}]++
	if a.Err != nil {
		m.errs[[2]string{a.Namespace, a.ErrorClass}]++
	}
	if m.leading[a.Namespace] == nil {
		m.leading[a.Namespace] = map[uuid.UUID]bool{}
	}
}

func (m *metrics) LeadershipStarted(l election.Leadership) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leading[l.Namespace] == nil {
		m.leading[l.Namespace] = map[uuid.UUID]bool{}
	}
	m.leading[l.Namespace][l.Candidate] = true
}

func (m *metrics) LeadershipStopped(l election.Leadership) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leading[l.Namespace], l.Candidate)
	m.stops[[2]string{l.Namespace, string(l.Reason)}]++
}

func (m *metrics) HandoffWake(w election.Wake) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wakes[[2]string{w.Namespace, w.Source}]++
}

// ServeHTTP writes the metrics in Prometheus's text format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintln(w, "# TYPE sqlelect_is_leader gauge")
	for _, ns := range sortedKeys(m.leading) {
		v := 0
		if len(m.leading[ns]) > 0 {
			v = 1
		}
		fmt.Fprintf(w, "sqlelect_is_leader{namespace=%q} %d\n", ns, v)
	}
	writeCounter(w, "sqlelect_elections_total", "outcome", m.elections)
	writeCounter(w, "sqlelect_leadership_stops_total", "reason", m.stops)
	writeCounter(w, "sqlelect_errors_total", "class", m.errs)
	writeCounter(w, "sqlelect_handoff_wakes_total", "source", m.wakes)
}

func writeCounter(w io.Writer, name, label string, values map[[2]string]int) {
	fmt.Fprintf(w, "# TYPE %s counter\n", name)
	keys := make([][2]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"\x00"+keys[i][1] < keys[j][0]+"\x00"+keys[j][1] })
	for _, k := range keys {
		fmt.Fprintf(w, "%s{namespace=%q,%s=%q} %d\n", name, k[0], label, k[1], values[k])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// health is the /healthz endpoint: every Elector's election.HealthCheck.
type health struct {
	mu     sync.Mutex
	checks []*election.HealthCheck
}

func (h *health) add(c *election.HealthCheck) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, c)
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	checks := append([]*election.HealthCheck(nil), h.checks...)
	h.mu.Unlock()
	var errs []error
	for _, c := range checks {
		errs = append(errs, c.Check(r))
	}
	if err := errors.Join(errs...); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// serveHTTP serves /metrics and /healthz on addr until ctx ends. It returns
// once the listener is bound, with the address it is bound to.
func serveHTTP(ctx context.Context, addr string, m *metrics, h *health) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	mux.Handle("/healthz", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return strings.Replace(ln.Addr().String(), "[::]", "localhost", 1), nil
}
