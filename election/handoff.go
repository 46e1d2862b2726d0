package election

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// Fast handoff. When a leader vacates the seat (UnregisterCandidate, or
// Resign while leading), the other candidates should try at once rather than
// at their next tick. Two paths carry the news:
//
//   - In process: every running Elector joins the hub of its (connection
//     pool, namespace). The vacating transaction wakes all of them.
//   - Across processes, on PostgreSQL through pgx: the vacating transaction
//     sends NOTIFY on handoffChannel, naming the candidate and the namespace,
//     delivered at commit; each hub keeps one LISTEN connection while it has
//     Electors, and wakes them when its namespace is named.
//
// The candidate that vacated is never woken by its own handoff.
//
// Wake-ups are hints. They coalesce, may be lost (a listener reconnecting),
// and may be spurious; the tick remains the fallback.

// handoffChannel is the PostgreSQL notification channel of every namespace.
const handoffChannel = "sqlelect_handoff"

// listenBackoff spaces the listener's reconnections: from 100 ms doubling
// up to 5 s, ±50%.
var listenBackoff = backoff{first: 100 * time.Millisecond, max: 5 * time.Second, jitter: 0.5}

// minListenPool is the smallest limit on open connections for which a hub
// takes one of the pool's connections to listen.
const minListenPool = 3

// wakeSource says what woke an Elector.
type wakeSource int

const (
	wakeLocal  wakeSource = iota + 1 // a vacating transaction in this process
	wakeNotify                       // a notification from the database
)

type hubKey struct {
	pool      any // the *sql.DB, or the *Election when it has none
	namespace string
}

// hub is the set of running Electors sharing a pool and a namespace.
type hub struct {
	members map[*Elector]struct{}

	// The listener, when the dialect can listen.
	cancel context.CancelFunc
	done   chan struct{}

	listenMu  sync.Mutex
	listening bool
	ready     chan struct{} // closed while listening; replaced when it stops
}

var hubs = struct {
	sync.Mutex
	m map[hubKey]*hub
}{m: map[hubKey]*hub{}}

func (e *Election) hubKey() hubKey {
	if pool := e.pool(); pool != nil {
		return hubKey{pool: pool, namespace: e.namespace}
	}
	return hubKey{pool: e, namespace: e.namespace}
}

func (e *Election) pool() *sql.DB {
	pool, err := e.db.DB()
	if err != nil {
		return nil
	}
	return pool
}

// registerHandoff installs, once per Election (New calls it), the hook that
// runs in every transaction vacating the seat.
func (e *Election) registerHandoff() {
	e.handoffOnce.Do(func() { e.onVacate(e.announceVacancy) })
}

// announceVacancy runs inside the vacating transaction: NOTIFY (delivered at
// commit) and a wake-up of this process's Electors. Those woken early block
// on the leader row (or SQLite's write lock) until the transaction ends, and
// then see the vacant seat.
func (e *Election) announceVacancy(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error {
	if n, ok := e.d.(dialect.Notifier); ok {
		if err := n.Notify(ctx, conn, handoffChannel, handoffPayload(leader, e.namespace)); err != nil {
			return err
		}
	}
	wakeHub(e.hubKey(), wakeLocal, leader)
	return nil
}

// handoffPayload is "<candidate uuid>:<namespace>".
func handoffPayload(leader uuid.UUID, namespace string) string {
	return leader.String() + ":" + namespace
}

func parseHandoffPayload(p string) (leader uuid.UUID, namespace string, ok bool) {
	const n = len("00000000-0000-0000-0000-000000000000")
	if len(p) <= n || p[n] != ':' {
		return uuid.Nil, "", false
	}
	id, err := uuid.Parse(p[:n])
	if err != nil {
		return uuid.Nil, "", false
	}
	return id, p[n+1:], true
}

// wakeHub wakes the hub's Electors, except the candidate that vacated.
func wakeHub(k hubKey, src wakeSource, vacated uuid.UUID) {
	hubs.Lock()
	defer hubs.Unlock()
	if h := hubs.m[k]; h != nil {
		for el := range h.members {
			if el.id != vacated {
				el.poke(src)
			}
		}
	}
}

// joinHub adds el to its hub, starting the hub's listener if it is the
// first member and the database can listen.
func joinHub(el *Elector) *hub {
	e := el.e
	k := e.hubKey()
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.m[k]
	if h == nil {
		h = &hub{members: map[*Elector]struct{}{}, ready: make(chan struct{})}
		hubs.m[k] = h
		if n, ok := e.d.(dialect.Notifier); ok {
			if pool := e.pool(); pool != nil {
				if limit := pool.Stats().MaxOpenConnections; limit > 0 && limit < minListenPool {
					e.log.Info("election: not listening for handoffs: the pool allows too few connections; candidates wait for their next tick",
						"max_open_conns", limit, "needed", minListenPool)
				} else {
					ctx, cancel := context.WithCancel(context.Background())
					h.cancel, h.done = cancel, make(chan struct{})
					go h.listen(ctx, k, n, pool, e)
				}
			}
		}
	}
	h.members[el] = struct{}{}
	return h
}

// leaveHub removes el from its hub; the last member out stops the listener
// and waits for it.
func leaveHub(el *Elector, h *hub) {
	k := el.e.hubKey()
	hubs.Lock()
	delete(h.members, el)
	last := len(h.members) == 0
	if last && hubs.m[k] == h {
		delete(hubs.m, k)
	}
	hubs.Unlock()
	if last && h.cancel != nil {
		h.cancel()
		<-h.done
	}
}

// listen keeps one LISTEN connection open, reconnecting with a jittered
// backoff, until ctx ends.
func (h *hub) listen(ctx context.Context, k hubKey, n dialect.Notifier, pool *sql.DB, e *Election) {
	defer close(h.done)
	failures := 0 // since the last successful subscription
	connected := false
	for {
		err := n.Listen(ctx, pool, handoffChannel,
			func() {
				if connected {
					// Notifications sent while reconnecting are lost; a
					// spurious round is cheaper than a missed handoff.
					wakeHub(k, wakeNotify, uuid.Nil)
				}
				connected = true
				failures = 0
				h.setListening(true)
			},
			func(payload string) {
				if leader, ns, ok := parseHandoffPayload(payload); ok && ns == k.namespace {
					wakeHub(k, wakeNotify, leader)
				}
			})
		h.setListening(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, dialect.ErrCannotListen) {
			e.log.Info("election: not listening for handoffs; candidates wait for their next tick", "reason", err)
			return
		}
		failures++
		wait := listenBackoff.wait(failures)
		e.log.Warn("election: handoff listener failed; reconnecting", "err", err, "retry_in", wait)
		if !pause(ctx, wait) {
			return
		}
	}
}

func (h *hub) setListening(on bool) {
	h.listenMu.Lock()
	defer h.listenMu.Unlock()
	if on == h.listening {
		return
	}
	h.listening = on
	if on {
		close(h.ready)
	} else {
		h.ready = make(chan struct{})
	}
}

// listeningC returns a channel closed while the hub's listener is
// subscribed (for tests).
func (h *hub) listeningC() <-chan struct{} {
	h.listenMu.Lock()
	defer h.listenMu.Unlock()
	return h.ready
}

// onVacate registers fn to run in the transaction that vacates the seat
// (UnregisterCandidate or Resign by the leader), e.g. to wake candidates.
// leader is the candidate that gave the seat up.
func (e *Election) onVacate(fn func(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.vacated = append(e.vacated, fn)
}

func (e *Election) runVacated(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error {
	e.mu.Lock()
	fns := append([]func(context.Context, gorm.ConnPool, uuid.UUID) error(nil), e.vacated...)
	e.mu.Unlock()
	for _, fn := range fns {
		if err := fn(ctx, conn, leader); err != nil {
			return err
		}
	}
	return nil
}
