package election

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// ErrUnhealthy is returned by HealthCheck.Check when an Elector or a Group
// believes it leads a namespace but has not renewed its lease there for
// longer than its trust window plus the check's tolerance.
var ErrUnhealthy = errors.New("election: leader has not renewed within its trust window")

// DefaultHealthTolerance is the tolerance of NewHealthCheck when given 0.
const DefaultHealthTolerance = 5 * time.Second

// A Runner is an Elector or a Group: what runs a candidate's leadership,
// and what NewHealthCheck watches. No other type implements it.
type Runner interface {
	// ID returns the candidate id.
	ID() uuid.UUID
	// Run runs the candidate until ctx ends.
	Run(ctx context.Context) error
	machines() []*machine
}

var (
	_ Runner = (*Elector)(nil)
	_ Runner = (*Group)(nil)
)

// HealthCheck is a liveness check of an Elector or a Group for a probe,
// like client-go's leader election healthz adaptor. It is unhealthy when,
// in some namespace, the candidate believes it leads — it holds
// leadership, or the work its OnStartedLeading began is still running —
// while its last successful grant or renewal there is older than its trust
// window (Expire() - SafetyMargin) plus the tolerance. A healthy leader
// steps down when the trust window passes and its leader work returns once
// its context is cancelled; the check catches a process where that did not
// happen (work that ignores its context, a wedged process), which a
// liveness probe should restart. Followers, and leaders that renew, are
// healthy.
//
// Check answers from memory, without a database call, and is safe for
// concurrent use. HealthCheck is an http.Handler too: 200 "ok", or 503
// with the reason.
type HealthCheck struct {
	r         Runner
	tolerance time.Duration
}

// NewHealthCheck returns the health check of r, an *Elector or a *Group,
// with the given tolerance (DefaultHealthTolerance when 0). It returns
// ErrInvalidOption for a nil r or a negative tolerance.
func NewHealthCheck(r Runner, tolerance time.Duration) (*HealthCheck, error) {
	switch {
	case r == nil || isNilRunner(r):
		return nil, fmt.Errorf("%w: NewHealthCheck: nil Elector or Group", ErrInvalidOption)
	case tolerance < 0:
		return nil, fmt.Errorf("%w: NewHealthCheck: negative tolerance %v", ErrInvalidOption, tolerance)
	case tolerance == 0:
		tolerance = DefaultHealthTolerance
	}
	return &HealthCheck{r: r, tolerance: tolerance}, nil
}

func isNilRunner(r Runner) bool {
	switch v := r.(type) {
	case *Elector:
		return v == nil
	case *Group:
		return v == nil
	}
	return false
}

// Name names the check: "sqlelect-" and the namespace of an Elector, or
// "sqlelect-group-" and the candidate id of a Group.
func (h *HealthCheck) Name() string {
	if el, ok := h.r.(*Elector); ok {
		return "sqlelect-" + el.e.namespace
	}
	return "sqlelect-group-" + h.r.ID().String()
}

// Check returns nil when the Elector or Group is healthy, else an error
// matching ErrUnhealthy that names the namespace and says how long ago it
// last renewed. r is not used (it may be nil); the parameter makes
// HealthCheck fit client-go's and controller-runtime's checker signatures.
func (h *HealthCheck) Check(r *http.Request) error {
	var errs []error
	for _, m := range h.r.machines() {
		if err := m.health(h.tolerance); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// health returns nil unless the machine believes it leads (it holds
// leadership, or the work its OnStartedLeading began still runs) while
// its last grant or renewal is older than its trust window plus tolerance.
func (m *machine) health(tolerance time.Duration) error {
	m.box.lock()
	leading, renewed, now := m.cur != nil, m.renewed, m.clk.Now()
	m.box.unlock()
	if !leading && m.working.Load() == 0 {
		return nil
	}
	if age := now.Sub(renewed); age > m.t.trust()+tolerance {
		what := "leads"
		if !leading {
			what = "stopped leading, but its leader work is still running"
		}
		return fmt.Errorf("%w: namespace %q, candidate %s %s; last renewal %v ago, trust window %v, tolerance %v",
			ErrUnhealthy, m.e.namespace, m.id, what, age.Round(time.Millisecond), m.t.trust(), tolerance)
	}
	return nil
}
