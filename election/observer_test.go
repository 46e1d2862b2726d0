package election

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// obsEvent is one call of an Observer method.
type obsEvent struct {
	kind string // attempt, started, stopped, stepped-down, wake
	a    Attempt
	l    Leadership
	w    Wake
}

// recObserver records every Observer call.
type recObserver struct{ events stream[obsEvent] }

func (o *recObserver) Attempt(a Attempt)              { o.events.add(obsEvent{kind: "attempt", a: a}) }
func (o *recObserver) LeadershipStarted(l Leadership) { o.events.add(obsEvent{kind: "started", l: l}) }
func (o *recObserver) LeadershipStopped(l Leadership) { o.events.add(obsEvent{kind: "stopped", l: l}) }
func (o *recObserver) SteppedDown(l Leadership)       { o.events.add(obsEvent{kind: "stepped-down", l: l}) }
func (o *recObserver) HandoffWake(w Wake)             { o.events.add(obsEvent{kind: "wake", w: w}) }

func attemptOf(id uuid.UUID, out Outcome) func(obsEvent) bool {
	return func(ev obsEvent) bool { return ev.kind == "attempt" && ev.a.Candidate == id && ev.a.Outcome == out }
}

// TestObserverSeesElectorRounds: an Observer set with WithObserver sees a
// grant, renewals, a follower's rounds, a resignation with its reason, the
// handoff wake of the follower, its grant, and the shutdown of the new
// leader, with durations and tenures, on every database.
func TestObserverSeesElectorRounds(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			obs := &recObserver{}
			e := newTestElection(t, db, testdb.Namespace(t), 3*time.Second, WithObserver(obs))
			cfg := ElectorConfig{Interval: 200 * time.Millisecond, ShutdownTimeout: time.Second}
			a, err := e.NewElector(uuid.New(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			// b's interval is long: it can only take over quickly when a
			// handoff wakes it.
			cfg.Interval = time.Second
			b, err := e.NewElector(uuid.New(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			runA := startRun(t, a)
			st, i := obs.events.wait(t, "a's grant", 0, func(ev obsEvent) bool { return ev.kind == "started" })
			if st.l.Candidate != a.ID() || st.l.Namespace != e.Namespace() || st.l.Lease.Term == 0 || st.l.Reason != "" {
				t.Fatalf("LeadershipStarted = %+v", st.l)
			}
			led, _ := obs.events.wait(t, "a's led attempt", i, attemptOf(a.ID(), OutcomeLed))
			if led.a.Duration <= 0 || led.a.Err != nil || led.a.ErrorClass != "" || !led.a.Lease.HeldBy(a.ID()) {
				t.Fatalf("led attempt = %+v", led.a)
			}
			_, i = obs.events.wait(t, "a's renewal", i, attemptOf(a.ID(), OutcomeRenewed))

			startRun(t, b)
			fol, i := obs.events.wait(t, "b's follower round", i, attemptOf(b.ID(), OutcomeFollower))
			if !fol.a.Lease.HeldBy(a.ID()) {
				t.Fatalf("b's follower attempt saw %+v, want a's lease", fol.a.Lease)
			}

			if err := a.Resign(electorCtx(t)); err != nil {
				t.Fatal(err)
			}
			stop, _ := obs.events.wait(t, "a's stop", i, func(ev obsEvent) bool { return ev.kind == "stopped" && ev.l.Candidate == a.ID() })
			if stop.l.Reason != StopResigned || stop.l.Tenure <= 0 || stop.l.Lease.Term != st.l.Lease.Term {
				t.Fatalf("LeadershipStopped = %+v", stop.l)
			}
			w, _ := obs.events.wait(t, "b's handoff wake", i, func(ev obsEvent) bool { return ev.kind == "wake" && ev.w.Candidate == b.ID() })
			if w.w.Source != "local" && w.w.Source != "notify" {
				t.Fatalf("wake source = %q", w.w.Source)
			}
			_, i = obs.events.wait(t, "b's grant", i, attemptOf(b.ID(), OutcomeLed))

			if err := runA.stop(t); err != nil {
				t.Fatal(err)
			}
			for _, ev := range obs.events.snapshot() {
				if ev.kind == "stepped-down" || (ev.kind == "attempt" && ev.a.Outcome == OutcomeError) {
					t.Errorf("unexpected %s: %+v", ev.kind, ev)
				}
			}
			_ = i
		})
	}
}

// TestObserverStepDown: when an Elector's calls fail or hang past its
// trust window it steps down, and the Observer sees failed attempts with
// their error class, SteppedDown, and LeadershipStopped with reason
// stepped_down.
func TestObserverStepDown(t *testing.T) {
	for _, mode := range []string{"cut", "stall"} {
		t.Run(mode, func(t *testing.T) {
			db := testdb.Open(t, testdb.Target{Name: "sqlite"})
			obs := &recObserver{}
			e := newTestElection(t, db, testdb.Namespace(t), 2*time.Second, WithObserver(obs))
			el, err := e.NewElector(uuid.New(), ElectorConfig{Interval: 300 * time.Millisecond, SafetyMargin: 800 * time.Millisecond, ShutdownTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			l := &hookLink{}
			l.install(el)
			startRun(t, el)
			_, i := obs.events.wait(t, "a grant", 0, func(ev obsEvent) bool { return ev.kind == "started" })
			if mode == "cut" {
				l.cut()
			} else {
				l.stall()
			}
			sd, j := obs.events.wait(t, "the step-down", i, func(ev obsEvent) bool { return ev.kind == "stepped-down" })
			// The loop's Attempt may come in between; the next stop is this one.
			next, _ := obs.events.wait(t, "the stop", j+1, func(ev obsEvent) bool { return ev.kind == "stopped" })
			if next.l.Reason != StopSteppedDown || next.l.Lease.Term != sd.l.Lease.Term {
				t.Fatalf("after SteppedDown: %+v, want LeadershipStopped with reason %q", next.l, StopSteppedDown)
			}
			want := ClassOther // errLinkCut
			if mode == "stall" {
				want = ClassTimeout
			}
			f, _ := obs.events.wait(t, "a failed attempt", i, attemptOf(el.ID(), OutcomeError))
			if f.a.ErrorClass != want || f.a.Err == nil {
				t.Fatalf("failed attempt: class %q err %v, want class %q", f.a.ErrorClass, f.a.Err, want)
			}
			l.heal()
		})
	}
}

func TestWithObserverNil(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	if _, err := New(db, WithObserver(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("WithObserver(nil): err = %v, want ErrInvalidOption", err)
	}
}

func TestErrorClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("election: Elect: %w", ErrConflict), ClassConflict},
		{ErrNotMigrated, ClassNotMigrated},
		{fmt.Errorf("election: Elect: %w", ErrReadOnly), ClassReadOnly},
		{fmt.Errorf("x: %w", ErrInvalidOption), ClassInvalid},
		{ErrInvalidCandidate, ClassInvalid},
		{fmt.Errorf("election: Elect: %w", context.DeadlineExceeded), ClassTimeout},
		{context.Canceled, ClassCanceled},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, ClassUnreachable},
		{fmt.Errorf("x: %w", driver.ErrBadConn), ClassUnreachable},
		{mysqldriver.ErrInvalidConn, ClassUnreachable},
		{io.ErrUnexpectedEOF, ClassUnreachable},
		{errors.New("syntax error"), ClassOther},
	} {
		if got := ErrorClass(c.err); got != c.want {
			t.Errorf("ErrorClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestHealthCheckCutLeader: a TCP proxy cuts the leader's connections.
// With leader work that returns when its context is cancelled, the Elector
// steps down and stays healthy. With leader work that ignores its context,
// the replica still acts as leader after the trust window: the check turns
// unhealthy (Check and the HTTP form) once the last renewal is older than
// the trust window plus the tolerance, not before, and healthy again when
// the work returns.
func TestHealthCheckCutLeader(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		for _, work := range []string{"obedient", "stuck"} {
			t.Run(tg.Name+"/"+work, func(t *testing.T) {
				p, db := proxiedDB(t, tg)
				obs := &recObserver{}
				e := newTestElection(t, db, testdb.Namespace(t), 2*time.Second, WithObserver(obs))
				release := make(chan struct{})
				var workDone atomic.Bool
				el, err := e.NewElector(uuid.New(), ElectorConfig{
					Interval: 300 * time.Millisecond, SafetyMargin: 800 * time.Millisecond, ShutdownTimeout: time.Second,
					OnStartedLeading: func(ctx context.Context, _ Lease) {
						defer workDone.Store(true)
						if work == "stuck" {
							<-release
							return
						}
						<-ctx.Done()
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				const tolerance = 500 * time.Millisecond
				hc, err := NewHealthCheck(el, tolerance)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(hc.Name(), e.Namespace()) {
					t.Errorf("Name() = %q", hc.Name())
				}
				startRun(t, el)
				t.Cleanup(func() {
					select {
					case <-release:
					default:
						close(release)
					}
				})
				_, i := obs.events.wait(t, "the grant", 0, func(ev obsEvent) bool { return ev.kind == "started" })
				obs.events.wait(t, "a renewal", i, attemptOf(el.ID(), OutcomeRenewed))
				if err := hc.Check(nil); err != nil {
					t.Fatalf("leader that renews: %v", err)
				}
				el.box.lock()
				lastRenewal := el.m.renewed
				el.box.unlock()
				p.Cut()
				obs.events.wait(t, "the step-down", i, func(ev obsEvent) bool { return ev.kind == "stepped-down" })
				limit := lastRenewal.Add(2*time.Second - 800*time.Millisecond + tolerance)

				if work == "obedient" {
					// Past the limit, the check stays healthy: the Elector
					// stepped down and its work returned.
					time.Sleep(time.Until(limit) + 300*time.Millisecond)
					if !workDone.Load() {
						t.Fatal("the leader work did not return")
					}
					if err := hc.Check(nil); err != nil {
						t.Fatalf("after stepping down: %v", err)
					}
					return
				}
				deadline := time.Now().Add(10 * time.Second)
				for hc.Check(nil) == nil {
					if time.Now().After(deadline) {
						t.Fatal("the check stayed healthy with the leader work running past the trust window")
					}
					time.Sleep(20 * time.Millisecond)
				}
				if now := time.Now(); now.Before(limit) {
					t.Fatalf("unhealthy %v before the trust window plus the tolerance had passed", limit.Sub(now))
				}
				err = hc.Check(nil)
				if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "still running") {
					t.Fatalf("Check = %v, want ErrUnhealthy naming the running work", err)
				}
				rec := httptest.NewRecorder()
				hc.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
				if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "trust window") {
					t.Fatalf("ServeHTTP: %d %q, want 503 with the reason", rec.Code, rec.Body.String())
				}
				close(release)
				for !workDone.Load() {
					time.Sleep(10 * time.Millisecond)
				}
				if err := hc.Check(nil); err != nil {
					t.Fatalf("after the work returned: %v", err)
				}
				rec = httptest.NewRecorder()
				hc.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
				if rec.Code != http.StatusOK {
					t.Fatalf("ServeHTTP after recovery: %d", rec.Code)
				}
				p.Resume()
			})
		}
	}
}

func TestNewHealthCheckRejects(t *testing.T) {
	if _, err := NewHealthCheck(nil, 0); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil Elector: %v", err)
	}
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	e := newTestElection(t, db, testdb.Namespace(t), time.Second)
	el, err := e.NewElector(uuid.New(), ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewHealthCheck(el, -time.Second); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("negative tolerance: %v", err)
	}
	hc, err := NewHealthCheck(el, 0)
	if err != nil || hc.tolerance != DefaultHealthTolerance {
		t.Fatalf("NewHealthCheck(el, 0) = %v, %v", hc, err)
	}
	if err := hc.Check(nil); err != nil {
		t.Errorf("an Elector that never ran: %v", err)
	}
}
