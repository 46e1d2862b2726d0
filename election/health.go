package election

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrUnhealthy is returned by HealthCheck.Check when the Elector believes
// it leads but has not renewed its lease for longer than its trust window
// plus the check's tolerance.
var ErrUnhealthy = errors.New("election: leader has not renewed within its trust window")

// DefaultHealthTolerance is the tolerance of NewHealthCheck when given 0.
const DefaultHealthTolerance = 5 * time.Second

// HealthCheck is a liveness check of an Elector for a probe, like
// client-go's leader election healthz adaptor. The Elector is unhealthy
// when it believes it leads — it holds leadership, or the work its
// OnStartedLeading began is still running — while its last successful
// grant or renewal is older than its trust window (Expire() -
// SafetyMargin) plus the tolerance. A healthy Elector steps down when the
// trust window passes and its leader work returns once its context is
// cancelled; the check catches a process where that did not happen (work
// that ignores its context, a wedged process), which a liveness probe
// should restart. A follower, and a leader that renews, are healthy.
//
// Check answers from memory, without a database call, and is safe for
// concurrent use. HealthCheck is an http.Handler too: 200 "ok", or 503
// with the reason.
type HealthCheck struct {
	el        *Elector
	tolerance time.Duration
}

// NewHealthCheck returns the health check of el with the given tolerance
// (DefaultHealthTolerance when 0). It returns ErrInvalidOption for a nil
// Elector or a negative tolerance.
func NewHealthCheck(el *Elector, tolerance time.Duration) (*HealthCheck, error) {
	switch {
	case el == nil:
		return nil, fmt.Errorf("%w: NewHealthCheck: nil Elector", ErrInvalidOption)
	case tolerance < 0:
		return nil, fmt.Errorf("%w: NewHealthCheck: negative tolerance %v", ErrInvalidOption, tolerance)
	case tolerance == 0:
		tolerance = DefaultHealthTolerance
	}
	return &HealthCheck{el: el, tolerance: tolerance}, nil
}

// Name names the check: "sqlelect-" and the namespace.
func (h *HealthCheck) Name() string { return "sqlelect-" + h.el.e.namespace }

// Check returns nil when the Elector is healthy, else an error matching
// ErrUnhealthy that says how long ago it last renewed. r is not used (it
// may be nil); the parameter makes HealthCheck fit client-go's and
// controller-runtime's checker signatures.
func (h *HealthCheck) Check(r *http.Request) error {
	el := h.el
	el.mu.Lock()
	leading, renewed, now := el.cur != nil, el.renewed, el.now()
	el.mu.Unlock()
	working := el.working.Load() > 0
	if !leading && !working {
		return nil
	}
	window := el.e.expire - el.cfg.SafetyMargin
	if age := now.Sub(renewed); age > window+h.tolerance {
		what := "leads"
		if !leading {
			what = "stopped leading, but its leader work is still running"
		}
		return fmt.Errorf("%w: namespace %q, candidate %s %s; last renewal %v ago, trust window %v, tolerance %v",
			ErrUnhealthy, el.e.namespace, el.id, what, age.Round(time.Millisecond), window, h.tolerance)
	}
	return nil
}

// ServeHTTP answers 200 "ok" when Check returns nil, else 503 with the
// error.
func (h *HealthCheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.Check(r); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}
