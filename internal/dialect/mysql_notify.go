package dialect

// Handoff wake-ups on MySQL, MariaDB and TiDB, which have no NOTIFY.
//
// What the servers offer for one session to interrupt another is KILL QUERY
// <connection id>: it ends the statement the session is running, and a user
// may kill the statements of its own sessions without any privilege. So a
// listener is one connection of the pool that waits, for myWaitSeconds at a
// time (then again), in a statement KILL QUERY ends: on MySQL and MariaDB
// GET_LOCK on the slot (below) of the nearest listener below its own, or
// SLEEP for the lowest (see myChainWaitSQL for why not SLEEP for all); on
// TiDB SLEEP. Notify, inside the vacating transaction,
// finds the connection ids of the listeners of its channel in one statement
// and interrupts their waits. A woken listener calls fn("") ("any
// namespace": the interruption carries no payload, so every candidate of
// the pool that is not leading runs one round) and waits again. The
// Electors it wakes take the seat's row lock, so they wait for the
// vacating transaction to end, as after a local wake-up, and then see the
// vacant seat; after a rollback they find it held and have spent one round.
// A Group runs one unlocked round of all its namespaces, which finds the
// seat vacant when the vacating transaction sent its KILLs after its
// commit (package election does, in a transaction of its own), and
// otherwise at its next round.
//
// How Notify finds the listeners:
//
//   - MySQL and MariaDB: a listener holds one of mySlotCount user-level
//     locks, GET_LOCK('<name>:<crc32 of DATABASE()>:<slot>', 0), taking the
//     lowest free one, for as long as it listens; Notify reads the holder of
//     every slot with IS_USED_LOCK (the connection id) in one statement,
//     about 0.3 ms for 64 slots on MariaDB 10.11. The server releases a
//     lock when its session ends, so a listener whose connection dies frees
//     its slot. When every slot is taken, Listen returns ErrCannotListen
//     and that pool's candidates wait for their tick.
//   - TiDB: IS_USED_LOCK does not name the holder there (it returns 1 after
//     waiting about a second for a lock another session holds), so a
//     listener is found by its waiting statement, which carries the same
//     name as a literal, in information_schema.CLUSTER_PROCESSLIST (about
//     1.4 ms on one tidb-server). TiDB ends the whole session when KILL
//     QUERY reaches it between two statements: a listener that loses its
//     connection that way after it was woken takes a new one at once and
//     wakes every namespace.
//
// The name holds the channel and the current database, so that two
// applications on one server, or two schemas, do not wake each other. A
// Galera node's locks are its own: a wake-up reaches the listeners
// connected to the same node, the others wait for their tick.
//
// Listeners in this process (any pool) are not interrupted: Notify hands
// them the payload directly, so that they wake only the namespace it names
// and never the candidate that vacated (which, woken, could take the seat
// back before the others).
//
// Each wake-up is a hint, and harmless when it fails: Notify ignores every
// error (a KILL refused because the listener's pool connects as another
// user, a connection id that no longer exists: the id is read a moment
// before the KILL, and servers do not reuse ids until they wrap), and a KILL that comes while
// a listener is between two waits is lost on MySQL and MariaDB (a window of
// one round trip after each wake-up, when the listener has just woken every
// namespace). Candidates that missed one find the vacant seat at their tick.
//
// Listen first checks, with a lock and a statement of its own that no
// Notify looks for, that the pool's connections can do all this: that
// another connection finds this one (IS_USED_LOCK names it; on TiDB the
// process list shows its statement) and that a KILL QUERY sent through it
// interrupts the wait. When they cannot (a function or table the engine
// lacks, a proxy whose connection ids are not the server's, a KILL
// refused), Listen returns ErrCannotListen saying why, and the caller
// polls. It claims a slot only then, and calls ready once its first wait
// is sent.
//
// Other ways were weighed and left: a leader holding a lock that followers
// wait for with GET_LOCK needs a connection per seat held, and wakes only
// namespaces whose candidates wait on it; a table of notifications polled by
// listeners is polling; waiting on a row lock the vacating transaction takes
// needs a table of its own and a connection per waiter.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

var _ Notifier = mysql{}

// Tunables, variables for the tests.
var (
	// mySlotCount is the number of wake-up slots per channel and database
	// on a MySQL or MariaDB server: how many pools (processes) may listen
	// at once.
	mySlotCount = 64
	// myWaitSeconds is the length of one wait; a listener then waits again.
	// It also bounds how long the slot of a listener whose process died
	// stays taken: the server notices the closed connection only when the
	// wait ends, or when a Notify interrupts it.
	myWaitSeconds = 30
	// myProbeTimeout bounds Listen's check that a KILL QUERY interrupts the
	// wait; on a direct connection it takes a millisecond or two, but a
	// server busy with a whole test suite once took longer than 3 s.
	myProbeTimeout = 10 * time.Second
	// myStopTimeout bounds the KILL that ends a listener's session when it
	// stops, and each KILL Notify sends.
	myStopTimeout = 2 * time.Second
	// myKillTimeout bounds the KILLs of one Notify, sent from other
	// goroutines: their check that the listeners are still there, the
	// wait for a connection, and the KILLs themselves. A KILL that MariaDB
	// holds up longer wakes its listener no sooner than the next round.
	myKillTimeout = 250 * time.Millisecond
	// myKillWait bounds Notify's wait for its KILLs to be sent.
	myKillWait = 20 * time.Millisecond
	// myKillGrace is how long Notify gives its KILLs, once sent, to
	// complete.
	myKillGrace = 2 * time.Millisecond
)

// HoldsListenConn is true: a listener keeps one connection waiting.
func (mysql) HoldsListenConn() bool { return true }

// myName is what the lock names and the waiting statement start with for
// channel: the channel itself when it is short and plain (as package
// election's are), otherwise a hash of it. With ':', the crc32 of the
// database name (10 digits at most), ':' and a slot number, a lock name
// stays within MySQL's 64 characters.
func myName(channel string) string {
	plain := len(channel) > 0 && len(channel) <= 40
	for i := 0; plain && i < len(channel); i++ {
		c := channel[i]
		plain = c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	if plain {
		return channel
	}
	h := fnv.New64a()
	h.Write([]byte(channel))
	return fmt.Sprintf("sqlelect_%016x", h.Sum64())
}

// myPrefix is the SQL of the name's prefix on the current connection:
// name:crc32(database):, from one bound argument, the name.
const myPrefix = "(SELECT CONCAT(?, ':', CRC32(COALESCE(DATABASE(), '')), ':') AS p) x"

// myServerCols reads what tells a server and a channel apart (myServer):
// the prefix, and the server's host name, port and server id.
const myServerCols = "x.p, @@hostname, @@port, @@server_id"

// myServer is the prefix of a channel's names on a server, with what tells
// the server apart from others that may have a database of the same name.
type myServer struct {
	prefix   string
	host     string
	port     int64
	serverID int64
}

func (s *myServer) dest() []any { return []any{&s.prefix, &s.host, &s.port, &s.serverID} }

// myChainWaitSQL is the statement the listener of slot waits in: on MySQL
// and MariaDB, GET_LOCK on the slot of the nearest listener below it, held
// by that listener, or SLEEP when there is none; on TiDB, whose listeners
// have no slot (-1), SLEEP. It returns what the wait returned, the name of
// the lock it waited for (NULL for SLEEP) and p, which TiDB's Notify finds
// in the process list (tidbWaitLike), and which tells an operator what the
// statement is.
//
// On MariaDB a KILL QUERY that reaches a SLEEP as the server's one mutex of
// every SLEEP is busy (another SLEEP starting or ending) holds up the
// KILL, that mutex and so every SLEEP and every such KILL on the server,
// for the two seconds the server gives a KILL to deliver itself; two KILLs
// at once, or one sent just after another, are enough (measured on
// MariaDB 10.11: p99 2 s with two killers, 0.3 ms against GET_LOCK waits
// with 32). A GET_LOCK wait has a mutex of its own. Waiting on a lower
// slot only keeps the waits free of cycles, which the server would break
// with a deadlock error; only the lowest listener sleeps.
func myChainWaitSQL(p string, slot int) string {
	if slot <= 0 {
		return fmt.Sprintf("SELECT SLEEP(%d), NULL, '%s'", myWaitSeconds, p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT IF(w.n IS NULL, SLEEP(%d), GET_LOCK(w.n, %d)), w.n, '%s' FROM (SELECT CASE", myWaitSeconds, myWaitSeconds, p)
	for i := slot - 1; i >= 0; i-- {
		fmt.Fprintf(&b, " WHEN IS_USED_LOCK('%s%d') IS NOT NULL THEN '%s%d'", p, i, p, i)
	}
	b.WriteString(" END AS n) w")
	return b.String()
}

// myUsedSQL reads the connection id, the prefix and the holder of every
// slot.
func myUsedSQL() string { return mySlotsSQL("IS_USED_LOCK") }

// myFreeSQL reads the connection id, the prefix, and whether each slot is
// free.
func myFreeSQL() string { return mySlotsSQL("IS_FREE_LOCK") }

func mySlotsSQL(fn string) string {
	var b strings.Builder
	b.WriteString("SELECT CONNECTION_ID(), " + myServerCols)
	for i := range mySlotCount {
		fmt.Fprintf(&b, ", %s(CONCAT(x.p, %d))", fn, i)
	}
	b.WriteString(" FROM " + myPrefix)
	return b.String()
}

// tidbWaitLike is a LIKE pattern for the text of a SLEEP that ends with
// the quoted tag given as its one parameter: the waits of myChainWaitSQL
// and of the probe, and the two-column form of earlier releases, so that
// processes of both versions wake each other during a rolling upgrade.
const tidbWaitLike = "CONCAT('SELECT SLEEP(%), %''', ?, '''')"

// tidbListenersSQL reads the prefix and the connection ids of the
// statements waiting with it, on every tidb-server of the cluster.
var tidbListenersSQL = "SELECT " + myServerCols + ", pl.ID FROM " + myPrefix +
	" LEFT JOIN information_schema.CLUSTER_PROCESSLIST pl ON pl.INFO LIKE " + strings.Replace(tidbWaitLike, "?", "x.p", 1)

// myHolder is one listener Notify found: its connection id, and its slot
// (-1 on TiDB).
type myHolder struct {
	id   int64
	slot int
}

// listeners returns the server and prefix of channel's names on conn, and
// the listeners found.
func (d mysql) listeners(ctx context.Context, conn interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, name string) (myServer, []myHolder, error) {
	var srv myServer
	if d.tidb {
		rows, err := conn.QueryContext(ctx, tidbListenersSQL, name)
		if err != nil {
			return srv, nil, err
		}
		defer rows.Close()
		var hs []myHolder
		for rows.Next() {
			var id sql.NullInt64
			if err := rows.Scan(append(srv.dest(), &id)...); err != nil {
				return srv, nil, err
			}
			if id.Valid {
				hs = append(hs, myHolder{id: id.Int64, slot: -1})
			}
		}
		return srv, hs, rows.Err()
	}
	var hs []myHolder
	err := scanSlots(func() (*sql.Rows, error) { return conn.QueryContext(ctx, myUsedSQL(), name) }, nil, &srv, &hs)
	return srv, hs, err
}

// scanSlots runs query, which yields one row: the columns of extra, then
// those of myUsedSQL (the connection id, the server, the holder of every
// slot), and returns in srv and hs the server and the listeners found.
func scanSlots(query func() (*sql.Rows, error), extra []any, srv *myServer, hs *[]myHolder) error {
	rows, err := query()
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("mysql notification: no row")
	}
	var (
		self  int64
		slots = make([]sql.NullInt64, mySlotCount)
		dest  = append(append(extra[:len(extra):len(extra)], &self), srv.dest()...)
	)
	for i := range slots {
		dest = append(dest, &slots[i])
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	for i, s := range slots {
		if s.Valid && s.Int64 != 0 {
			*hs = append(*hs, myHolder{id: s.Int64, slot: i})
		}
	}
	return rows.Close()
}

// Notify interrupts the waits of the listeners of channel in other
// processes, and hands payload to those in this one. It never fails: a
// wake-up that cannot be sent must not undo the transaction that vacates
// the seat.
//
// The KILLs are sent from other goroutines, through a pool of this process
// that has listened on the same server (myKillPools), and Notify waits only
// until they are sent and have had a moment to complete (startKills), or,
// under a context from DeferNotifyWaits, leaves that wait to the caller
// for after the transaction, so
// that the vacating transaction, which holds the seat's row lock, never
// waits long for one. On MariaDB a KILL QUERY of a SLEEP can take two
// seconds to return, and to interrupt the wait, when it meets the server's
// SLEEP mutex busy (myChainWaitSQL), and KILLs queue behind it (measured:
// up to 8 s with three processes sending KILLs to one listener, when every
// listener slept); now and then one also hangs on the session of a
// process that died. Sent before Notify returns, they are sent even by a
// process that exits once it has vacated the seat. Only a process that has
// not listened on the server sends them inside the transaction.
func (d mysql) Notify(ctx context.Context, conn gorm.ConnPool, channel, payload string) error {
	srv, holders, err := d.listeners(ctx, conn, myName(channel))
	if err != nil {
		return nil
	}
	remote := deliverLocal(srv, holders, payload)
	if len(remote) == 0 {
		return nil
	}
	if pool := myKillPool(srv); pool != nil {
		wait := d.startKills(ctx, pool, myName(channel), srv, remote)
		if !deferNotifyWait(ctx, wait) {
			wait()
		}
		return nil
	}
	for _, h := range remote {
		_, _ = conn.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(h.id, 10))
	}
	return nil
}

// deliverLocal hands payload to this process's listeners of srv and
// returns the holders that are not this process's.
func deliverLocal(srv myServer, holders []myHolder, payload string) []myHolder {
	local := myDeliver(srv, payload)
	var remote []myHolder
	for _, h := range holders {
		if !slices.Contains(local, h) {
			remote = append(remote, h)
		}
	}
	return remote
}

// wake is Notify after a vacating statement that has committed and read
// the listeners of name on srv (holders): it hands each payload to this
// process's listeners and interrupts the others' waits from other
// goroutines, through the pool that listened on srv or else through pool
// (each KILL sent only once the connection it goes through is found on
// srv, with the listener still in its slot: killVerified), and returns
// once they are sent, within myKillWait.
func (d mysql) wake(ctx context.Context, pool *sql.DB, name string, srv myServer, holders []myHolder, payloads ...string) {
	var remote []myHolder
	for i, payload := range payloads {
		if r := deliverLocal(srv, holders, payload); i == 0 {
			remote = r // the same holders for every payload
		}
	}
	if len(remote) == 0 {
		return
	}
	if p := myKillPool(srv); p != nil {
		pool = p
	}
	if pool == nil {
		return
	}
	d.startKills(ctx, pool, name, srv, remote)()
}

// myKillPools are the pools through which this process has listened, by
// server and channel: Notify sends its KILLs through them. A pool stays
// until a listener on the same server and channel replaces it; one closed
// since fails its KILLs, which are hints.
var myKillPools = struct {
	sync.Mutex
	m        map[myServer]*sql.DB
	inflight map[myKill]bool           // KILLs under way: not sent twice at once
	budget   map[*sql.DB]chan struct{} // connections lent to KILLs, per pool (myKillBudget)
}{m: map[myServer]*sql.DB{}, inflight: map[myKill]bool{}, budget: map[*sql.DB]chan struct{}{}}

// myKill is one KILL QUERY: a connection on a server.
type myKill struct {
	srv myServer
	id  int64
}

func myKillPool(srv myServer) *sql.DB {
	myKillPools.Lock()
	defer myKillPools.Unlock()
	return myKillPools.m[srv]
}

// startKills interrupts the waits of hs through pool, from other
// goroutines, and returns a function that waits until every KILL has been
// sent and has had myKillGrace to complete (they take a fraction of a
// millisecond, unless MariaDB holds one up), and at the latest until
// myKillWait after startKills was called.
func (d mysql) startKills(ctx context.Context, pool *sql.DB, name string, srv myServer, hs []myHolder) (wait func()) {
	sent := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.killVerified(pool, name, srv, hs, sync.OnceFunc(func() { close(sent) }))
	}()
	deadline := time.NewTimer(myKillWait)
	return func() {
		defer deadline.Stop()
		select {
		case <-sent:
		case <-done:
			return
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
		grace := time.NewTimer(myKillGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
		case <-deadline.C:
		case <-ctx.Done():
		}
	}
}

// killVerified interrupts the waits of hs, the listeners of name Notify
// found on srv, through pool. It first checks through one of its
// connections that they are still there, on the same server (host, port
// and server id) in the same slot (on TiDB, waiting with the same prefix):
// so a pool that reaches another server, or a listener gone since, is
// never sent a KILL meant for another connection. It then sends the KILLs
// on that connection and, when the pool's budget (myKillBudget) has room,
// on more of its own, and calls allSent once the last has gone out (at
// once when there are none); a KILL of a connection that another Notify of
// this process is sending is not sent again.
//
// All of it ends after myKillTimeout: a KILL that MariaDB holds up longer
// has its connection closed, and the KILLs not sent by then are dropped.
// The pool is the application's, and a listener already holds one of its
// connections: KILLs that wait seconds must not take the others from the
// rounds that renew the leases.
func (d mysql) killVerified(pool *sql.DB, name string, srv myServer, hs []myHolder, allSent func()) {
	ctx, cancel := context.WithTimeout(context.Background(), myKillTimeout)
	defer cancel()
	budget := myKillBudget(pool)
	take := func(wait bool) *sql.Conn {
		if wait {
			select {
			case budget <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
		} else {
			select {
			case budget <- struct{}{}:
			default:
				return nil
			}
		}
		c, err := pool.Conn(ctx)
		if err != nil {
			<-budget
			return nil
		}
		return c
	}
	conn := take(true)
	if conn == nil {
		return
	}
	found, err := d.stillListening(ctx, conn, name, srv, hs)
	if err != nil {
		conn.Close()
		<-budget
		return
	}
	var kills []myKill
	for _, h := range found {
		if k := (myKill{srv: srv, id: h.id}); myKillStart(k) {
			kills = append(kills, k)
		}
	}
	var left atomic.Int64
	left.Store(int64(len(kills)))
	if len(kills) == 0 {
		allSent()
	}
	work := make(chan myKill, len(kills))
	for _, k := range kills {
		work <- k
	}
	close(work)
	send := func(c *sql.Conn) {
		defer func() { <-budget }()
		defer c.Close()
		for k := range work {
			if ctx.Err() == nil {
				if left.Add(-1) == 0 {
					allSent()
				}
				_, _ = c.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(k.id, 10))
			}
			myKillEnd(k)
		}
	}
	var wg sync.WaitGroup
	for range len(kills) - 1 {
		c := take(false)
		if c == nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(c)
		}()
	}
	send(conn)
	wg.Wait()
}

// myKillBudget returns the semaphore that bounds the connections pool lends
// to KILLs at once: eight, or, when the pool has a limit, two fewer than
// the limit (one is the listener's, one is left for the rounds), at least
// one.
func myKillBudget(pool *sql.DB) chan struct{} {
	myKillPools.Lock()
	defer myKillPools.Unlock()
	if b := myKillPools.budget[pool]; b != nil {
		return b
	}
	n := 8
	if limit := pool.Stats().MaxOpenConnections; limit > 0 {
		n = max(1, min(n, limit-2))
	}
	b := make(chan struct{}, n)
	myKillPools.budget[pool] = b
	return b
}

// stillListening returns those of hs that conn finds listening as Notify
// found them on srv: none when conn reaches another server. On MySQL and
// MariaDB it reads the holders of their slots only.
func (d mysql) stillListening(ctx context.Context, conn *sql.Conn, name string, srv myServer, hs []myHolder) ([]myHolder, error) {
	if d.tidb {
		now, found, err := d.listeners(ctx, conn, name)
		if err != nil || now != srv {
			return nil, err
		}
		var out []myHolder
		for _, h := range hs {
			if slices.Contains(found, h) {
				out = append(out, h)
			}
		}
		return out, nil
	}
	var (
		q    strings.Builder
		args []any // the slots', then the name (in the derived table, last)
		now  myServer
		ids  = make([]sql.NullInt64, len(hs))
		dest = now.dest()
	)
	q.WriteString("SELECT " + myServerCols)
	for i, h := range hs {
		q.WriteString(", IS_USED_LOCK(CONCAT(x.p, ?))")
		args = append(args, h.slot)
		dest = append(dest, &ids[i])
	}
	q.WriteString(" FROM " + myPrefix)
	args = append(args, name)
	if err := conn.QueryRowContext(ctx, q.String(), args...).Scan(dest...); err != nil || now != srv {
		return nil, err
	}
	var out []myHolder
	for i, h := range hs {
		if ids[i].Valid && ids[i].Int64 == h.id {
			out = append(out, h)
		}
	}
	return out, nil
}

// myKillStart records a KILL as under way, or reports false when it is.
func myKillStart(k myKill) bool {
	myKillPools.Lock()
	defer myKillPools.Unlock()
	if myKillPools.inflight[k] {
		return false
	}
	myKillPools.inflight[k] = true
	return true
}

func myKillEnd(k myKill) {
	myKillPools.Lock()
	defer myKillPools.Unlock()
	delete(myKillPools.inflight, k)
}

// myLocal is a listener of this process, to which Notify hands payloads
// instead of interrupting its wait.
type myLocal struct {
	srv    myServer
	holder myHolder
	ch     chan string
	lost   atomic.Bool // a payload did not fit in ch
}

var myLocals = struct {
	sync.Mutex
	m map[*myLocal]struct{}
}{m: map[*myLocal]struct{}{}}

// myDeliver hands payload to this process's listeners of srv and returns
// their slots and connections.
func myDeliver(srv myServer, payload string) []myHolder {
	myLocals.Lock()
	defer myLocals.Unlock()
	var hs []myHolder
	for l := range myLocals.m {
		if l.srv != srv {
			continue
		}
		hs = append(hs, l.holder)
		select {
		case l.ch <- payload:
		default:
			l.lost.Store(true)
		}
	}
	return hs
}

// myListener is one listening session: a connection taken out of the pool,
// with its slot (on MySQL and MariaDB) and its registration in myLocals.
type myListener struct {
	d      mysql
	db     *sql.DB
	conn   *sql.Conn
	name   string   // myName of the channel
	id     int64    // the connection's id
	srv    myServer // the server, and the name's prefix on it: name:crc32(database):
	slot   int      // -1 on TiDB
	local  *myLocal
	wait   chan waitResult // the running wait's result; nil when none runs
	cancel context.CancelFunc
}

// waitResult is how one wait ended: woken (interrupted by KILL QUERY), or
// err, or neither (its time was up).
type waitResult struct {
	woken bool
	err   error
	// took is the lower slot's lock the wait was granted (its listener
	// left): the listener releases it before it waits again.
	took string
}

// Listen takes one of db's connections, checks that a KILL QUERY
// interrupts its wait, claims a slot for it (MySQL, MariaDB), starts
// waiting, calls ready, and then calls fn("") each time the wait is
// interrupted and fn(payload) for each payload this process's Notify hands
// it, until ctx ends or the connection fails. The connection is then
// discarded: the server ends the session and releases the slot.
func (d mysql) Listen(ctx context.Context, db *sql.DB, channel string, ready func(), fn func(string)) error {
	name := myName(channel)
	l, err := d.openListener(ctx, db, name, true)
	if err != nil {
		return err
	}
	l.startWait()
	ready()
	woken := false
	for {
		served, err := l.serve(ctx, fn, woken)
		l.close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !served || !lostBetweenWaits(err) {
			return err
		}
		// A KILL QUERY that reached the session between two waits ended it
		// (TiDB): it was a wake-up. Listen on a new connection at once, and
		// wake every namespace once its wait is under way.
		if l, err = d.openListener(ctx, db, name, false); err != nil {
			return err
		}
		woken = true
	}
}

// lostBetweenWaits reports whether err, from a wait, says that the server
// closed the connection.
func lostBetweenWaits(err error) bool {
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, drv.ErrInvalidConn)
}

// openListener takes a connection from db, checks it with probe when asked,
// and on MySQL and MariaDB claims the lowest free slot of name for it. On
// error the connection is discarded.
func (d mysql) openListener(ctx context.Context, db *sql.DB, name string, probe bool) (*myListener, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	l := &myListener{d: d, db: db, conn: conn, name: name, slot: -1}
	err = conn.QueryRowContext(ctx, "SELECT CONNECTION_ID(), "+myServerCols+" FROM "+myPrefix, name).Scan(append([]any{&l.id}, l.srv.dest()...)...)
	if err != nil {
		err = cannotListen(ctx, err, "reading the connection id")
	} else if probe {
		err = l.probe(ctx)
	}
	if err == nil && !d.tidb {
		err = l.claimSlot(ctx)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	l.local = &myLocal{srv: l.srv, holder: myHolder{id: l.id, slot: l.slot}, ch: make(chan string, 64)}
	myLocals.Lock()
	myLocals.m[l.local] = struct{}{}
	myLocals.Unlock()
	myKillPools.Lock()
	if old := myKillPools.m[l.srv]; old != nil && old != db {
		delete(myKillPools.budget, old)
	}
	myKillPools.m[l.srv] = db
	myKillPools.Unlock()
	return l, nil
}

// claimSlot takes the lowest free slot of the listener's name, trying the
// next when another listener takes it first.
func (l *myListener) claimSlot(ctx context.Context) error {
	free := make([]sql.NullInt64, mySlotCount)
	var (
		id   int64
		srv  myServer
		dest = append([]any{&id}, srv.dest()...)
	)
	for i := range free {
		dest = append(dest, &free[i])
	}
	if err := l.conn.QueryRowContext(ctx, myFreeSQL(), l.name).Scan(dest...); err != nil {
		return cannotListen(ctx, err, "reading the wake-up slots")
	}
	for i, f := range free {
		if f.Int64 != 1 {
			continue
		}
		var got sql.NullInt64
		if err := l.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", l.srv.prefix+strconv.Itoa(i)).Scan(&got); err != nil {
			return cannotListen(ctx, err, "taking a wake-up slot")
		}
		if got.Int64 == 1 {
			l.slot = i
			return nil
		}
	}
	return fmt.Errorf("%w: all %d wake-up slots of %q are taken (one per listening pool on this server and database)",
		ErrCannotListen, mySlotCount, strings.TrimSuffix(l.srv.prefix, ":"))
}

// startWait runs the listener's wait, myChainWaitSQL, in the background.
func (l *myListener) startWait() {
	l.startWaitSQL(myChainWaitSQL(l.srv.prefix, l.slot))
}

// startWaitSQL runs q, a wait that returns myChainWaitSQL's columns, on the
// listener's connection in the background.
func (l *myListener) startWaitSQL(q string) {
	qctx, cancel := context.WithTimeout(context.Background(), time.Duration(myWaitSeconds)*time.Second+myStopTimeout)
	l.cancel = cancel
	ch := make(chan waitResult, 1)
	l.wait = ch
	go func() {
		var (
			got  sql.NullInt64
			lock sql.NullString
			tag  string
		)
		err := l.conn.QueryRowContext(qctx, q).Scan(&got, &lock, &tag)
		var me *drv.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1317:
			// Query execution was interrupted (MariaDB).
			ch <- waitResult{woken: true}
		case errors.As(err, &me) && (me.Number == 1969 || me.Number == 3024):
			// max_statement_time (MariaDB) or max_execution_time (MySQL)
			// ended the wait: wait again.
			ch <- waitResult{}
		case err != nil:
			ch <- waitResult{err: err}
		case !lock.Valid:
			// SLEEP returns 1 when it is interrupted (MySQL, TiDB).
			ch <- waitResult{woken: got.Int64 == 1}
		case !got.Valid:
			// GET_LOCK returns NULL when it is interrupted (MySQL).
			ch <- waitResult{woken: true}
		case got.Int64 == 1:
			ch <- waitResult{took: lock.String}
		default:
			ch <- waitResult{} // its time was up
		}
	}()
}

// ended takes the result of the wait that ended.
func (l *myListener) ended(r waitResult) waitResult {
	l.wait = nil
	l.cancel()
	return r
}

// probeLock is the user-level lock a listener holds while it checks, on
// MySQL and MariaDB, that IS_USED_LOCK names it; not a slot, so that no
// Notify interrupts the check.
func probeLock(id int64) string { return "sqlelect_probe:" + strconv.FormatInt(id, 10) }

// probe checks, before the listener claims a slot, that it can be found and
// woken the way Notify does: through another of the pool's connections,
// IS_USED_LOCK names this connection as the holder of a lock it took (on
// TiDB, the process list shows its waiting statement), and a KILL QUERY
// interrupts its wait. The check uses a lock and a statement of its own,
// which no Notify looks for. A KILL that comes before the wait has started
// is lost on MySQL and MariaDB, so it is repeated until the wait ends; on
// TiDB the statement is in the process list only once it runs, and one KILL
// is sent then.
func (l *myListener) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, myProbeTimeout)
	defer cancel()
	tag := l.srv.prefix + "probe"
	if !l.d.tidb {
		var got sql.NullInt64
		if err := l.conn.QueryRowContext(pctx, "SELECT GET_LOCK(?, 0)", probeLock(l.id)).Scan(&got); err != nil {
			return cannotListen(ctx, err, "taking the probe's lock")
		}
		if got.Int64 != 1 {
			return fmt.Errorf("%w: GET_LOCK(%q, 0) returned %v", ErrCannotListen, probeLock(l.id), got)
		}
	}
	l.startWaitSQL(myChainWaitSQL(tag, -1))
	retry := 2 * time.Millisecond
	found, killed := false, false
	for {
		if !found {
			var (
				holder sql.NullInt64
				err    error
			)
			if l.d.tidb {
				err = l.db.QueryRowContext(pctx, "SELECT MAX(ID) FROM information_schema.CLUSTER_PROCESSLIST WHERE INFO LIKE "+tidbWaitLike, tag).Scan(&holder)
			} else {
				err = l.db.QueryRowContext(pctx, "SELECT IS_USED_LOCK(?)", probeLock(l.id)).Scan(&holder)
			}
			if err != nil {
				return cannotListen(ctx, err, "finding the listener")
			}
			found = holder.Valid && holder.Int64 == l.id
			if !found && !l.d.tidb {
				named := "no connection"
				if holder.Valid {
					named = strconv.FormatInt(holder.Int64, 10)
				}
				return fmt.Errorf("%w: IS_USED_LOCK names %s, not connection %d, as the holder of the lock that connection holds "+
					"(a proxy between the application and the server, or an engine whose IS_USED_LOCK does not name the holder)",
					ErrCannotListen, named, l.id)
			}
		}
		if found && (!l.d.tidb || !killed) {
			if _, err := l.db.ExecContext(pctx, "KILL QUERY "+strconv.FormatInt(l.id, 10)); err != nil {
				return cannotListen(ctx, err, "interrupting the wait with KILL QUERY")
			}
			killed = true
		}
		t := time.NewTimer(retry)
		select {
		case r := <-l.wait:
			t.Stop()
			r = l.ended(r)
			switch {
			case r.err != nil:
				return fmt.Errorf("mysql notification: waiting: %w", r.err)
			case !r.woken:
				return fmt.Errorf("%w: a wait of %d s ended by itself before KILL QUERY interrupted it", ErrCannotListen, myWaitSeconds)
			}
			if !l.d.tidb {
				if _, err := l.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", probeLock(l.id)); err != nil {
					return fmt.Errorf("mysql notification: releasing the probe's lock: %w", err)
				}
			}
			return nil
		case <-t.C:
		case <-pctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			what := "a KILL QUERY sent through another connection did not interrupt the wait"
			if !found {
				what = "the waiting statement was not found in information_schema.CLUSTER_PROCESSLIST"
			}
			return fmt.Errorf("%w: %s within %v", ErrCannotListen, what, myProbeTimeout)
		}
		retry = min(2*retry, 100*time.Millisecond)
	}
}

// serve handles the running wait's end and waits again, until ctx ends or
// the connection fails, calling fn for each wake-up. It reports whether a
// wait ended without error before the one that failed (the connection
// worked). When woken is set, it calls fn("") first.
func (l *myListener) serve(ctx context.Context, fn func(string), woken bool) (served bool, err error) {
	for {
		if l.wait == nil {
			l.startWait()
		}
		// Wake the namespaces only once the next wait is sent: a KILL for
		// a later handoff then finds it running, or it is for a handoff
		// whose candidates this wake-up reaches anyway.
		if woken {
			fn("")
			woken = false
		}
		for l.wait != nil {
			select {
			case p := <-l.local.ch:
				if l.local.lost.Swap(false) {
					p = ""
				}
				fn(p)
			case r := <-l.wait:
				r = l.ended(r)
				if r.err != nil {
					return served, fmt.Errorf("mysql notification: waiting: %w", r.err)
				}
				if r.took != "" {
					// The listener below left: let the next one claim its
					// slot, and wait on the one below that.
					if _, err := l.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", r.took); err != nil {
						return served, fmt.Errorf("mysql notification: releasing a lower slot: %w", err)
					}
				}
				served = true
				woken = r.woken
			case <-ctx.Done():
				return served, ctx.Err()
			}
		}
	}
}

// close ends the listener's wait, if one runs, with KILL QUERY through
// another connection (repeated: one that comes before the wait has started
// is lost), or failing that by closing the socket; then it discards the
// connection, never putting it back in the pool with a lock held: the
// server ends the session and releases the slot.
func (l *myListener) close() {
	if l.local != nil {
		myLocals.Lock()
		delete(myLocals.m, l.local)
		myLocals.Unlock()
	}
	if l.wait != nil {
		kctx, cancel := context.WithTimeout(context.Background(), myStopTimeout)
		retry := 2 * time.Millisecond
		for l.wait != nil {
			if _, err := l.db.ExecContext(kctx, "KILL QUERY "+strconv.FormatInt(l.id, 10)); err != nil {
				// The socket is closed on this side; the server ends the
				// wait, and the session, within myWaitSeconds.
				l.cancel()
			}
			t := time.NewTimer(retry)
			select {
			case r := <-l.wait:
				l.ended(r)
			case <-t.C:
			}
			t.Stop()
			retry = min(2*retry, 100*time.Millisecond)
		}
		cancel()
	}
	_ = l.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = l.conn.Close()
}

// cannotListen wraps err, from what a listener does, in ErrCannotListen when
// the server refused the statement for a reason that will not pass (an
// engine without the function or table, a missing privilege); other errors
// (a connection lost, the context) are returned as they are, to be retried.
func cannotListen(ctx context.Context, err error, doing string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var me *drv.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1040, 1053, 1203, 1205, 1213, 1317:
			// Too many connections, shutdown, lock wait, deadlock,
			// interrupted: they pass.
		default:
			return fmt.Errorf("%w: %s: %w", ErrCannotListen, doing, err)
		}
	}
	return fmt.Errorf("mysql notification: %s: %w", doing, err)
}
