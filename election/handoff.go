package election

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
//     delivered at commit; the hubs of a pool share one LISTEN connection
//     while they have Electors, and it wakes a hub when its namespace is
//     named.
//   - Across processes, on SQLite on Linux: the vacating transaction appends
//     the same payload to a file beside the database, and the pool's
//     listener, told of the change by inotify, wakes the hub it names. The
//     line is written after the commit of a transaction the library began
//     (those woken find the write lock free), before the commit of a
//     caller's (those woken wait for the write lock).
//   - Across processes, on MySQL, MariaDB and TiDB: the vacating
//     transaction interrupts each pool's listener (a connection waiting in
//     SELECT SLEEP) with KILL QUERY; the interruption carries no payload, so
//     a woken listener wakes every hub of its pool. Listeners in this
//     process get the payload instead.
//
// The candidate that vacated is never woken by its own handoff.
//
// Wake-ups are hints. They coalesce, may be lost (a listener reconnecting),
// and may be spurious; the tick remains the fallback.

// handoffChannel is the PostgreSQL notification channel of every namespace
// whose tables are on the search path. Tables in a schema (WithSchema) have
// a channel of their own (channelFor), so that two applications sharing a
// database and a namespace name never wake each other.
const handoffChannel = "sqlelect_handoff"

// channelFor returns the notification channel of the tables in schema: a
// hash of the name keeps any schema within PostgreSQL's 63-byte limit on
// channel names.
func channelFor(schema string) string {
	if schema == "" {
		return handoffChannel
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s_%016x", handoffChannel, h.Sum64())
}

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
	schema    string
	namespace string
}

// listenKey names the listener a pool's hubs share: one LISTEN connection
// per pool and schema, however many namespaces its Electors run in (the
// payload names the namespace).
type listenKey struct {
	pool   any
	schema string
}

// hub is the set of running Electors (and Groups, one member per
// namespace) sharing a pool and a namespace.
type hub struct {
	members map[hubMember]struct{}
	l       *listener // shared with the pool's other hubs; nil when the dialect cannot listen
}

// listener is one LISTEN connection and its goroutine, shared by every hub
// of a pool and schema, and counted by them.
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
	m         map[hubKey]*hub
	listeners map[listenKey]*listener
}{m: map[hubKey]*hub{}, listeners: map[listenKey]*listener{}}

func (e *Election) hubKey() hubKey {
	if pool := e.pool(); pool != nil {
		return hubKey{pool: pool, schema: e.schema, namespace: e.namespace}
	}
	return hubKey{pool: e, schema: e.schema, namespace: e.namespace}
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
// commit) and a wake-up of this process's Electors. (On PostgreSQL, Resign
// and UnregisterCandidate notify in their one vacating statement,
// VacateNotify, and wake this process's Electors after it.) Those woken early block
// on the leader row (or SQLite's write lock) until the transaction ends, and
// then see the vacant seat.
func (e *Election) announceVacancy(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error {
	// Local first: SQLite's notification is seen as soon as it is written,
	// and this process's Electors need not wait for it.
	wakeHub(e.hubKey(), wakeLocal, leader)
	if n, ok := e.d.(dialect.Notifier); ok {
		if err := n.Notify(ctx, conn, channelFor(e.schema), handoffPayload(leader, e.namespace)); err != nil {
			return err
		}
	}
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
		h.wake(src, vacated)
	}
}

// hubMember is what a hub wakes: the machine of an Elector, or of a Group
// in one namespace. Its methods must not block.
type hubMember interface {
	// candidate is the member's candidate id.
	candidate() uuid.UUID
	// poke tells the member that another candidate (vacated; uuid.Nil
	// when not known) vacated the seat, which may let it win now.
	poke(src wakeSource, vacated uuid.UUID)
	// pokeOusted tells the member that someone else vacated its own term:
	// an operator, or an UnregisterCandidate of its id in another process.
	pokeOusted()
	// wakeAny tells the member of a wake-up that names no namespace.
	wakeAny()
}

// wake pokes h's members but the one that vacated, which is told instead
// that its term ended: when someone else vacated it (an operator), it is
// still leading and stops at once rather than at its next round. hubs'
// mutex is held.
func (h *hub) wake(src wakeSource, vacated uuid.UUID) {
	for m := range h.members {
		if m.candidate() != vacated {
			m.poke(src, vacated)
		} else {
			m.pokeOusted()
		}
	}
}

// wakeAll wakes every member of the hubs sharing the listener of lk, for a
// wake-up that names no namespace: the listener (re)connected, and
// notifications sent meanwhile were lost, or a MySQL listener was
// interrupted, which carries no payload. Electors take the locked path; a
// Group runs one round (wakeAny), which reads every seat in one statement
// and tries only those it finds free, instead of locking every seat it
// does not lead, most of them live.
func wakeAll(lk listenKey) {
	hubs.Lock()
	defer hubs.Unlock()
	for k, h := range hubs.m {
		if k.pool == lk.pool && k.schema == lk.schema {
			for m := range h.members {
				m.wakeAny()
			}
		}
	}
}

// joinHub adds m, a member in e's namespace, to its hub. The first hub of
// a pool and schema starts their shared listener, if the database can
// listen.
func joinHub(e *Election, m hubMember) *hub {
	k := e.hubKey()
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.m[k]
	if h == nil {
		h = &hub{members: map[hubMember]struct{}{}, l: acquireListener(e, listenKey{pool: k.pool, schema: k.schema})}
		hubs.m[k] = h
	}
	h.members[m] = struct{}{}
	return h
}

// acquireListener returns the listener of lk, started if it is the first
// hub's, or nil when the database cannot listen. hubs' mutex is held.
func acquireListener(e *Election, lk listenKey) *listener {
	if l := hubs.listeners[lk]; l != nil {
		l.hubs++
		return l
	}
	n, ok := e.d.(dialect.Notifier)
	pool := e.pool()
	if !ok || pool == nil {
		return nil
	}
	if limit := pool.Stats().MaxOpenConnections; n.HoldsListenConn() && limit > 0 && limit < minListenPool {
		e.log.Info("election: not listening for handoffs: the pool allows too few connections; candidates wait for their next tick",
			"max_open_conns", limit, "needed", minListenPool)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{hubs: 1, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	hubs.listeners[lk] = l
	go l.listen(ctx, lk, n, pool, e)
	return l
}

// leaveHub removes m, a member in e's namespace, from its hub; the last
// member out removes the hub, and the last hub of a listener stops it and
// waits for it.
func leaveHub(e *Election, m hubMember, h *hub) {
	k := e.hubKey()
	var stop *listener
	hubs.Lock()
	delete(h.members, m)
	if len(h.members) == 0 && hubs.m[k] == h {
		delete(hubs.m, k)
		if l := h.l; l != nil {
			if l.hubs--; l.hubs == 0 {
				delete(hubs.listeners, listenKey{pool: k.pool, schema: k.schema})
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

// listen keeps one LISTEN connection open, reconnecting with a jittered
// backoff, until ctx ends, and wakes the hub a notification names.
func (l *listener) listen(ctx context.Context, lk listenKey, n dialect.Notifier, pool *sql.DB, e *Election) {
	defer close(l.done)
	defer l.setListening(false)
	_ = listenLoop(ctx, n, pool, channelFor(lk.schema), e.log.With("listener", "handoff"), true,
		func(again bool) {
			if again {
				// Notifications sent while reconnecting are lost; a
				// spurious round is cheaper than a missed handoff.
				wakeAll(lk)
			}
			l.setListening(true)
		},
		func(payload string) {
			if payload == "" {
				wakeAll(lk) // some notifications may have been lost
				return
			}
			if leader, ns, ok := parseHandoffPayload(payload); ok {
				wakeHub(hubKey{pool: lk.pool, schema: lk.schema, namespace: ns}, wakeNotify, leader)
			}
		})
}

// listenLoop keeps a subscription to channel on pool until ctx ends or the
// database says it cannot listen (logged once): it calls subscribed each
// time the subscription is confirmed (again: after a reconnection, which
// may have lost notifications), and got with each payload. After a
// failure it subscribes again with a jittered backoff, logging a warning;
// with retryFirst false, a first subscription that fails ends it, with
// that error.
func listenLoop(ctx context.Context, n dialect.Notifier, pool *sql.DB, channel string, log *slog.Logger,
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
		wait := listenBackoff.wait(failures)
		log.Warn("election: handoff listener failed; reconnecting", "err", err, "retry_in", wait)
		if !pause(ctx, wait) {
			return nil
		}
	}
}

func (l *listener) setListening(on bool) {
	l.listenMu.Lock()
	defer l.listenMu.Unlock()
	if on == l.listening {
		return
	}
	l.listening = on
	if on {
		close(l.ready)
	} else {
		l.ready = make(chan struct{})
	}
}

// listeningC returns a channel closed while the hub's listener is
// subscribed (for tests); it is never closed for a hub without one.
func (h *hub) listeningC() <-chan struct{} {
	if h.l == nil {
		return nil
	}
	h.l.listenMu.Lock()
	defer h.l.listenMu.Unlock()
	return h.l.ready
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
