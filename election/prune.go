package election

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// Prune deletes the rows of candidates that expired more than one expiry
// window ago, and the terms of the history that ended longer ago than the
// history retention (WithHistoryRetention, default 30 days), and returns
// how many rows it deleted. A leader runs it now and then, every five
// expiry windows, after a renewal, never inside one (an Elector for its
// namespace, a Group for all it leads); call it directly from maintenance
// jobs if you like.
func (e *Election) Prune(ctx context.Context, opts ...CallOption) (int, error) {
	return e.prune(ctx, opts, []string{e.namespace})
}

// prune is Prune in namespaces nss: three statements whatever their
// number, one more per expired member row, and on MySQL, MariaDB and TiDB
// one more per expired candidate row (pruneCandidates). Expired member rows
// (of Groups gone) are pruned whatever their namespaces.
func (e *Election) prune(ctx context.Context, opts []CallOption, nss []string) (int, error) {
	var n int
	err := e.autocommit(ctx, "Prune", opts, func(conn gorm.ConnPool, _ bool) error {
		n = 0
		window := e.d.DurationArg(-e.expire)
		m, err := e.pruneCandidates(ctx, conn, nss)
		n += m
		if err != nil {
			return err
		}
		// The member rows of Groups gone for as long (their candidate
		// rows, once their own, are pruned by then or on a later prune).
		var members []uuid.UUID
		if err := e.scanIDs(ctx, conn, &members, dialect.MembersExpired(e.d), window); err != nil {
			return err
		}
		for _, id := range members {
			m, err := affected(conn.ExecContext(ctx, dialect.PruneMember(e.d), id, window))
			if err != nil {
				return err
			}
			n += int(m)
		}
		q, args := dialect.BatchPruneHistory(e.d, nss, -e.retention)
		h, err := affected(conn.ExecContext(ctx, q, args...))
		n += int(h)
		return err
	})
	return n, err
}

// pruneCandidates deletes the candidate rows of nss expired for longer than
// an expiry window and returns how many it deleted: one statement on
// PostgreSQL and SQLite, which judges every row again as it deletes it
// (BatchPrune); on MySQL, MariaDB and TiDB a reading of the expired rows
// and one statement per row, each deleted by its key, so that a candidate
// that came back since the reading is kept and no range is locked.
func (e *Election) pruneCandidates(ctx context.Context, conn gorm.ConnPool, nss []string) (int, error) {
	if q, args, ok := dialect.BatchPrune(e.d, nss, -e.expire); ok {
		m, err := affected(conn.ExecContext(ctx, q, args...))
		return int(m), err
	}
	window := e.d.DurationArg(-e.expire)
	rows, err := conn.QueryContext(ctx, dialect.BatchExpired(e.d, len(nss)), append(anyArgs(nss), window)...)
	if err != nil {
		return 0, err
	}
	type key struct {
		ns string
		id uuid.UUID
	}
	var expired []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.ns, &k.id); err != nil {
			rows.Close()
			return 0, err
		}
		expired = append(expired, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, k := range expired {
		m, err := affected(conn.ExecContext(ctx, e.q.Prune, k.ns, k.id, window, window))
		if err != nil {
			return n, err
		}
		n += int(m)
	}
	return n, nil
}

// scanIDs runs query, whose rows are one id each, into ids.
func (e *Election) scanIDs(ctx context.Context, conn gorm.ConnPool, ids *[]uuid.UUID, query string, args ...any) error {
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return err
		}
		*ids = append(*ids, id)
	}
	return rows.Err()
}

// pruneEvery is how often a leader prunes: every five expiry windows. A
// row is pruned once expired for a window anyway, and an idle leader
// renews with a statement or two a third of a window, which frequent
// prunes (three statements) would add much to.
func (e *Election) pruneEvery() time.Duration { return 5 * e.expire }

// maybePrune prunes e's namespace, after a renewal of an Elector's, when a
// prune is due (pruneDue), never in the caller's transaction; failures are
// logged. A Group prunes those it leads in pieces (Group.pruneLed).
func (e *Election) maybePrune(ctx context.Context, opts []CallOption) {
	if len(opts) > 0 || !e.pruneDue() {
		return
	}
	n, err := e.prune(ctx, nil, []string{e.namespace})
	e.logPrune(ctx, n, err)
}

// pruneDue reports whether a prune of what e's candidate leads is due: at
// most every pruneEvery, the first time at least pruneEvery after it was
// first asked. A true answer begins that prune: the next is due a
// pruneEvery later.
func (e *Election) pruneDue() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Spread, so that the processes of a fleet started together do not
	// all prune at once: the first prune comes 1 to 1.5 pruneEvery after
	// the first ask, the next ones 1 to 1.2 pruneEvery apart.
	every := e.pruneEvery()
	if e.lastPrune.IsZero() {
		e.lastPrune = time.Now().Add(rand.N(every/2 + 1))
	}
	due := time.Since(e.lastPrune) >= every
	if due {
		e.lastPrune = time.Now().Add(rand.N(every/5 + 1))
	}
	return due
}

// logPrune logs the end of a prune that deleted n rows: a failure as a
// warning (but for ctx's end), the rows deleted at debug level.
func (e *Election) logPrune(ctx context.Context, n int, err error) {
	switch {
	case err != nil && ctx.Err() == nil:
		e.log.Warn("election: pruning expired candidates and old history failed", "err", err)
	case err == nil && n > 0:
		e.log.Debug("election: pruned expired candidates and old history", "count", n)
	}
}

func anyArgs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
