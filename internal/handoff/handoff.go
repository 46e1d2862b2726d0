// Package handoff carries the news that a seat was vacated to the
// candidates that may take it, so that they try at once rather than at
// their next tick. Two paths carry it:
//
//   - In process: every running Elector, and a Group in each of its
//     namespaces, joins the Hub of its (connection pool, schema,
//     namespace). The vacating transaction wakes all of them (Wake).
//   - Across processes: the vacating transaction sends the Payload on the
//     Channel of its schema through the dialect (NOTIFY on PostgreSQL, a
//     line in a file beside the database on SQLite on Linux, KILL QUERY of
//     the listeners on MySQL, MariaDB and TiDB, which carries no payload).
//     The hubs of a pool and schema share one listener while they have
//     members; it wakes the hub a payload names, and every hub of its pool
//     and schema for a wake-up that names none (WakeAll).
//
// The candidate that vacated is never woken by its own handoff; it is told
// its term ended instead, which matters when someone else (an operator)
// vacated it. Wake-ups are hints: they coalesce, may be lost (a listener
// reconnecting), and may be spurious; the tick remains the fallback.
package handoff

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/backoff"
	"github.com/sqlelect/sqlelect/internal/dialect"
)

// channel is the notification channel of every namespace whose tables are
// on the search path.
const channel = "sqlelect_handoff"

// Channel returns the notification channel of the tables in schema ("" for
// the search path). Tables in a schema have a channel of their own, so that
// two applications sharing a database and a namespace name never wake each
// other; a hash of the name keeps any schema within PostgreSQL's 63-byte
// limit on channel names.
func Channel(schema string) string {
	if schema == "" {
		return channel
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s_%016x", channel, h.Sum64())
}

// Payload is the notification of a vacancy: "<candidate uuid>:<namespace>".
func Payload(leader uuid.UUID, namespace string) string {
	return leader.String() + ":" + namespace
}

// ParsePayload reads a Payload.
func ParsePayload(p string) (leader uuid.UUID, namespace string, ok bool) {
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

// MinListenPool is the smallest limit on open connections for which a
// listener takes one of the pool's connections, where listening holds one.
const MinListenPool = 3

// listenBackoff spaces a listener's reconnections: from 100 ms doubling up
// to 5 s, ±50%.
var listenBackoff = backoff.Backoff{First: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}

// Source says what woke a member.
type Source int

const (
	Local  Source = iota + 1 // a vacating transaction in this process
	Notify                   // a notification from the database
)

// Member is what a hub wakes: the machine of an Elector, or of a Group in
// one namespace. Its methods must not block.
type Member interface {
	// Candidate is the member's candidate id.
	Candidate() uuid.UUID
	// Poke tells the member that another candidate (vacated; uuid.Nil
	// when not known) vacated the seat, which may let it win now.
	Poke(src Source, vacated uuid.UUID)
	// PokeOusted tells the member that someone else vacated its own term:
	// an operator, or an UnregisterCandidate of its id in another process.
	PokeOusted()
	// WakeAny tells the member of a wake-up that names no namespace.
	WakeAny()
}

// Key names a hub: the pool (the *sql.DB, or any value unique to the
// members that have none), the schema and the namespace.
type Key struct {
	Pool      any
	Schema    string
	Namespace string
}

// listenKey names the listener a pool's hubs share: one per pool and
// schema, however many namespaces its members run in (the payload names
// the namespace).
type listenKey struct {
	pool   any
	schema string
}

// Hub is the set of running members sharing a pool, schema and namespace.
type Hub struct {
	members map[Member]struct{}
	l       *listener // shared with the pool's other hubs; nil when the dialect cannot listen
}

// listener is one subscription and its goroutine, shared by every hub of a
// pool and schema, and counted by them.
type listener struct {
	hubs   int // hubs using it; guarded by hubs' mutex
	cancel context.CancelFunc
	done   chan struct{}

	listenMu  sync.Mutex
	listening bool
	ready     chan struct{} // closed while listening; replaced when it stops
}

var hubs = struct {
	sync.Mutex
	m         map[Key]*Hub
	listeners map[listenKey]*listener
}{m: map[Key]*Hub{}, listeners: map[listenKey]*listener{}}

// Wake wakes the members of k's hub, except the candidate that vacated,
// which is told instead that its term ended.
func Wake(k Key, src Source, vacated uuid.UUID) {
	hubs.Lock()
	defer hubs.Unlock()
	if h := hubs.m[k]; h != nil {
		for m := range h.members {
			if m.Candidate() != vacated {
				m.Poke(src, vacated)
			} else {
				m.PokeOusted()
			}
		}
	}
}

// WakeAll wakes every member of the hubs of pool and schema, for a wake-up
// that names no namespace: the listener (re)connected, and notifications
// sent meanwhile were lost, or a MySQL listener was interrupted, which
// carries no payload.
func WakeAll(pool any, schema string) {
	hubs.Lock()
	defer hubs.Unlock()
	for k, h := range hubs.m {
		if k.Pool == pool && k.Schema == schema {
			for m := range h.members {
				m.WakeAny()
			}
		}
	}
}

// Listen is how the hubs of a pool listen: n (nil when the dialect cannot),
// on Pool (nil when there is none), logging to Log.
type Listen struct {
	N    dialect.Notifier
	Pool *sql.DB
	Log  *slog.Logger
}

// Join adds m to k's hub. The first hub of a pool and schema starts their
// shared listener, if l can listen.
func Join(k Key, m Member, l Listen) *Hub {
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.m[k]
	if h == nil {
		h = &Hub{members: map[Member]struct{}{}, l: acquireListener(listenKey{pool: k.Pool, schema: k.Schema}, l)}
		hubs.m[k] = h
	}
	h.members[m] = struct{}{}
	return h
}

// acquireListener returns the listener of lk, started if it is the first
// hub's, or nil when the database cannot listen. hubs' mutex is held.
func acquireListener(lk listenKey, l Listen) *listener {
	if ln := hubs.listeners[lk]; ln != nil {
		ln.hubs++
		return ln
	}
	if l.N == nil || l.Pool == nil {
		return nil
	}
	if limit := l.Pool.Stats().MaxOpenConnections; l.N.HoldsListenConn() && limit > 0 && limit < MinListenPool {
		l.Log.Info("election: not listening for handoffs: the pool allows too few connections; candidates wait for their next tick",
			"max_open_conns", limit, "needed", MinListenPool)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln := &listener{hubs: 1, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	hubs.listeners[lk] = ln
	go ln.listen(ctx, lk, l)
	return ln
}

// Leave removes m from k's hub h; the last member out removes the hub, and
// the last hub of a listener stops it and waits for it.
func Leave(k Key, m Member, h *Hub) {
	var stop *listener
	hubs.Lock()
	delete(h.members, m)
	if len(h.members) == 0 && hubs.m[k] == h {
		delete(hubs.m, k)
		if l := h.l; l != nil {
			if l.hubs--; l.hubs == 0 {
				delete(hubs.listeners, listenKey{pool: k.Pool, schema: k.Schema})
				stop = l
			}
		}
	}
	hubs.Unlock()
	if stop != nil {
		stop.cancel()
		<-stop.done
	}
}

// listen keeps one subscription open, reconnecting with a jittered
// backoff, until ctx ends, and wakes the hub a notification names.
func (ln *listener) listen(ctx context.Context, lk listenKey, l Listen) {
	defer close(ln.done)
	defer ln.setListening(false)
	_ = Loop(ctx, l.N, l.Pool, Channel(lk.schema), l.Log.With("listener", "handoff"), true,
		func(again bool) {
			if again {
				// Notifications sent while reconnecting are lost; a
				// spurious round is cheaper than a missed handoff.
				WakeAll(lk.pool, lk.schema)
			}
			ln.setListening(true)
		},
		func(payload string) {
			if payload == "" {
				WakeAll(lk.pool, lk.schema) // some notifications may have been lost
				return
			}
			if leader, ns, ok := ParsePayload(payload); ok {
				Wake(Key{Pool: lk.pool, Schema: lk.schema, Namespace: ns}, Notify, leader)
			}
		})
}

// Loop keeps a subscription to channel on pool until ctx ends or the
// database says it cannot listen (logged once): it calls subscribed each
// time the subscription is confirmed (again: after a reconnection, which
// may have lost notifications), and got with each payload. After a
// failure it subscribes again with a jittered backoff, logging a warning;
// with retryFirst false, a first subscription that fails ends it, with
// that error.
func Loop(ctx context.Context, n dialect.Notifier, pool *sql.DB, channel string, log *slog.Logger,
	retryFirst bool, subscribed func(again bool), got func(payload string)) error {
	failures := 0 // since the last successful subscription
	ever := false
	for {
		err := n.Listen(ctx, pool, channel,
			func() {
				subscribed(ever)
				ever, failures = true, 0
			}, got)
		if !ever && !retryFirst {
			if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
				err = fmt.Errorf("%w: %w", cerr, err)
			}
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, dialect.ErrCannotListen) {
			log.Info("election: not listening for handoffs; candidates wait for their next tick", "reason", err)
			return err
		}
		failures++
		wait := listenBackoff.Wait(failures)
		log.Warn("election: handoff listener failed; reconnecting", "err", err, "retry_in", wait)
		if !backoff.Pause(ctx, wait) {
			return nil
		}
	}
}

func (ln *listener) setListening(on bool) {
	ln.listenMu.Lock()
	defer ln.listenMu.Unlock()
	if on == ln.listening {
		return
	}
	ln.listening = on
	if on {
		close(ln.ready)
	} else {
		ln.ready = make(chan struct{})
	}
}

// Listening returns a channel closed while the hub's listener is
// subscribed (for tests); it is never closed for a hub without one.
func (h *Hub) Listening() <-chan struct{} {
	if h.l == nil {
		return nil
	}
	h.l.listenMu.Lock()
	defer h.l.listenMu.Unlock()
	return h.l.ready
}

// Lookup returns k's hub, or nil (for tests).
func Lookup(k Key) *Hub {
	hubs.Lock()
	defer hubs.Unlock()
	return hubs.m[k]
}

// Listeners is the number of listeners of pool running (for tests).
func Listeners(pool any) int {
	hubs.Lock()
	defer hubs.Unlock()
	n := 0
	for k := range hubs.listeners {
		if k.pool == pool {
			n++
		}
	}
	return n
}

// SharesListener reports whether h and o listen through one listener (for
// tests).
func (h *Hub) SharesListener(o *Hub) bool { return h.l != nil && h.l == o.l }
