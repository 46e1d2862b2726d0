// Package election elects one leader per namespace among the processes that
// share a SQL database: PostgreSQL, MySQL/MariaDB or SQLite, through GORM.
//
// It is a single-database lease, not consensus. The database is the single
// source of truth; mutual exclusion holds as long as every participant uses
// the same database. Within that model it aims to be exactly right.
//
// # State
//
// Three tables, created by package migrate:
//
//   - election_candidates: one row per (namespace, candidate). A candidate
//     is a process identified by a UUID; it is live while its expires_at is
//     later than the database clock. RegisterCandidate and Heartbeat write
//     the row, with the Election's identity (hostname, pid, label);
//     UnregisterCandidate deletes it; rows expired for more than one
//     expiry window are pruned.
//   - election_leaders: one row per namespace, the seat. It holds the leader
//     (NULL when vacant), the term, and lease_expires_at. The row is created
//     by the first Elect of a namespace and never deleted, so the term never
//     goes back.
//   - election_history: one row per granted term, inserted by the
//     transaction that grants it and closed (ended_at, end_reason) by the
//     one that ends it: a resignation, an unregistration, the takeover of
//     a lapsed lease, or an operator's VacateSeat. Renewals do not touch
//     it. Ended terms older than the retention are pruned.
//
// A namespace is in one of three states: vacant (no leader), held (a leader
// whose lease has not expired), or expired (a leader whose lease has
// passed, which counts as vacant). Elect moves it:
//
//	vacant  --Elect(a)-->        held by a, term+1
//	expired --Elect(a)-->        held by a, term+1 (a may be the old holder)
//	held(a) --Elect(a)-->        held by a, same term, lease extended
//	held(a) --Elect(b)-->        held(a), unchanged: a live lease is never preempted
//	held(a) --Unregister(a)-->   vacant, term kept
//	held(a) --Resign(a)-->       vacant, term kept
//	held(a) --VacateSeat-->      vacant, term kept
//
// # Clock
//
// Every expiry is decided by the database's clock, read in the statement
// that decides (clock_timestamp() on PostgreSQL, SYSDATE(6) at UTC on
// MySQL, the system clock on SQLite, which shares a host with its
// callers). No host compares its own wall clock with another host's, so
// clock skew between application hosts cannot make two leaders. The
// library never uses GORM's NowFunc.
//
// A leader's own process cannot read the database clock continuously, so
// the Elector (see below) bounds its trust with the local monotonic clock:
// it leads until attemptStart + expire - margin, where attemptStart is taken
// before the Elect call that granted or renewed the lease. The lease in the
// database ends at dbNow + expire with dbNow read after attemptStart, so
// the local trust ends at least margin before anyone else can be elected,
// whatever the clocks of the hosts say. Only the rate of the local clock
// matters, not its setting.
//
// # Terms and fencing
//
// The term grows by one every time the lease is granted to a candidate that
// did not already hold a live one; renewals keep it. Within a term exactly
// one candidate leads, so (namespace, term) is a fencing token. Guard,
// called with WithTx inside the transaction that does leader-only work,
// checks that the lease still names the same leader and term and has not
// expired, and locks the leader row shared until that transaction ends: a
// new term cannot commit while the old leader's transaction is open, and a
// leader that lost the seat gets ErrNotLeader before it writes. Leader-only
// writes in the same database therefore never commit under a stale leader,
// even when the old leader was paused (GC, SIGSTOP, a slow network) past
// its lease.
//
// Renewals touch only the caller's own term: the one-statement renewal is an
// UPDATE guarded by leader_id, term and the lease still being live, so a
// candidate that slept through its term cannot extend someone else's. An
// Elector resigning while it leads vacates only the term it leads in, so a
// resignation can never vacate a newer term of the same candidate.
// UnregisterCandidate and Resign are given a candidate, not a term: they
// vacate the seat in whatever term that candidate holds, as does the final
// unregistration when an Elector's Run returns.
//
// # Transactions
//
// Every call takes a context and accepts WithTx: it then runs inside the
// caller's transaction, never commits or rolls it back, and its writes
// commit or vanish with the caller's. Without WithTx each call runs in its
// own short transaction (UnregisterCandidate, Resign, and Elect when it may
// take or change the seat) or in statements that each commit by themselves
// (the others, and Elect's one-statement renewal and unlocked read), and
// retries deadlocks, serialization failures and SQLITE_BUSY with a bounded,
// jittered backoff. In the caller's transaction those are returned at once,
// wrapped in ErrConflict, because the database has already aborted or
// poisoned it.
//
// Elect locks the leader row with SELECT ... FOR UPDATE (SQLite has no row
// locks; its single writer lock, taken first, serializes elections). When
// the row does not exist yet, two first callers race to insert it; the
// loser's insert is a no-op and it locks the new row and decides again,
// once. On MySQL and MariaDB, Elect's own transactions run at READ
// COMMITTED: at REPEATABLE READ a locking read of a missing row takes gap
// locks, and concurrent first elections deadlock. A candidate that can only
// lose (another candidate's lease is live by the database clock) learns it
// from an unlocked read and refreshes its own row without locking the seat,
// so followers never queue behind the leader or make it wait.
//
// # Guarantees
//
//   - At most one candidate holds an unexpired lease in a namespace at any
//     instant of the database clock, and each term has exactly one holder.
//   - Terms never decrease.
//   - A live lease is never taken from its holder; a vacated seat (the
//     leader unregistered or resigned) can be taken at once.
//   - With Guard and WithTx, no leader-only write commits after a newer term
//     was granted.
//   - An Elector stops leading locally before its lease can expire in the
//     database, as long as the local monotonic clock does not run slower
//     than the database's by more than the safety margin over one window.
//
// # Non-guarantees
//
//   - It is not consensus: if the database loses committed writes (a
//     failover to an asynchronous replica), two candidates can hold the same
//     term. Synchronous replication (PostgreSQL's
//     synchronous_standby_names, failing over only to a synchronous
//     standby) makes terms survive a failover.
//   - Work outside the database (sending email, calling an API) cannot be
//     fenced by Guard; gate it on Elector.IsLeader and accept that a paused
//     process may still act once after it lost the lease. Pass the term to
//     downstream systems that can check it.
//   - Liveness needs the database: while it is unreachable nobody is
//     elected, and leaders step down.
//   - Processes that ignore IsLeader and Guard can act as leaders whatever
//     the tables say.
//
// # Failure handling
//
//   - A crashed leader stops renewing; its lease expires after at most the
//     expiry window and the next Elect by another live candidate takes over
//     with the next term. Electors try at the moment the lease they last
//     read ends (its remaining time by the database clock, on their own
//     monotonic clock), not at their next tick.
//   - A graceful shutdown (UnregisterCandidate, or an Elector's Run
//     returning) vacates the seat at once; other Electors are woken
//     (PostgreSQL LISTEN/NOTIFY, or in-process) and take over in
//     milliseconds. An Elector vacates (Run's unregistration, Resign) only
//     once its OnStartedLeading has returned: a leader's work that does not
//     return in time keeps the seat until the lease expires by itself.
//   - A server that refuses writes (a standby, a primary set read-only)
//     makes every call that writes return ErrReadOnly; leaders step down
//     when their trust window passes, and Electors and Groups log it at
//     error level each round. Connections opened by session.Open that answered so are
//     discarded, so rounds recover as soon as the server (or, with a
//     multi-host DSN, another host) accepts writes.
//   - A database user that lacks a privilege on the tables gets
//     ErrPermissionDenied; an Elector or Group names the privilege once at
//     error level per streak of refused rounds. On MySQL and MariaDB,
//     whose open sessions see a database-level GRANT only at their next
//     USE, session.Open's pools discard the connection that was refused,
//     so the round after the GRANT succeeds.
//   - Invalid input returns a sentinel error (ErrInvalidCandidate,
//     ErrInvalidNamespace, ErrInvalidOption, ErrNotMigrated, ...) and changes
//     nothing.
//
// # The engine: Electors and Groups
//
// Two drivers run the election loop for a candidate: an Elector in one
// namespace (one Elect per round), a Group in many (one batch round for
// all of them, plus attempts on the seats it finds free). Each drives, per
// namespace, the same state machine (engine.go), which alone decides what
// a round's result means. Its states:
//
//   - following: not leading. It tries to take the seat when a reading
//     shows it free, at the end of another candidate's lease (the lease's
//     remaining time by the database clock, on the local monotonic clock:
//     crash failover one lease after the last renewal), and when a handoff
//     wake-up says the seat was vacated.
//   - leading: a grant started it, and every renewal extends the trust
//     window to the start of the round that renewed plus Expire() minus
//     SafetyMargin (monotonic clock). A watchdog ends it when the window
//     passes without a renewal (StopSteppedDown); a renewal held up past
//     the window may still land, and the next Elect, or a Group's next
//     round, renews that lease and leads again in the same term
//     (machine.reclaimLocked). A result naming another leader ends it
//     (StopLost), as does one showing that another process vacated its
//     term (StopVacated, then sitting out). A grant or renewal
//     that leaves less trust than one renewal period is renewed at once, so
//     a late answer does not cost a step-down. Its leader work runs while
//     it leads, one at a time per namespace, and the seat is never vacated
//     while it runs.
//   - sitting out: for one Interval after another process vacated its term
//     (an operator), however the Elector or Group learnt it (told at once,
//     its renewal failing, or finding another candidate in a newer term):
//     rounds heartbeat and read, and no handoff shortens it; after its own
//     Resign (or a Group's balancing) likewise, but another candidate's
//     handoff ends it (that candidate has held the seat since), once a
//     reading shows the seat past the term given up (machine.probeLocked).
//   - giving up: Resign, or a Group handing a namespace over. It has
//     stopped leading; once its work has returned and no call that may
//     grant the seat is in flight, it vacates its term, then sits out.
//     Called from the leader's work itself, the give-up returns at once and
//     finishes once the work has returned.
//   - closed: Run returned, or a Group left the namespace. It never leads
//     again; once the work has returned it vacates whatever term it holds
//     and deletes its candidate row.
//
// A leader renews by its lease, every Expire()/3 (or Interval, when
// longer); a follower polls every Interval. Both drivers offer the same
// callbacks (OnStartedLeading, OnStoppedLeading, OnNewLeader), the same
// HealthCheck, the same Observer calls, made in order and outside every
// lock of the library's, and the same stop reasons, each given where the
// decision is made.
//
// # Use
//
// Open the database with session.Open (or check a handle with New), run
// migrate.Up once, create one Election per namespace, and either call the
// protocol on a timer yourself:
//
//	e, err := election.New(db, election.WithNamespace("scheduler"), election.WithExpire(15*time.Second))
//	...
//	lease, err := e.Elect(ctx, id) // every few seconds
//	if lease.HeldBy(id) { ... leader-only work under e.Guard(ctx, lease, election.WithTx(tx)) ... }
//	...
//	e.UnregisterCandidate(ctx, id) // on shutdown
//
// or let an Elector run that loop, with callbacks when leadership starts
// and stops, or a Group in many namespaces at once.
//
// # Where things are
//
// Each file of the package answers one question:
//
//   - lease.go: what a call reports (Lease).
//   - election.go: what an Election is bound to and how New checks it.
//   - options.go: the options of New (Option) and of the calls (CallOption,
//     WithTx), and the namespace rules.
//   - errors.go: the sentinel errors.
//   - doc.go: this overview.
//   - protocol.go: the calls that write (RegisterCandidate, Heartbeat,
//     Elect, UnregisterCandidate, Resign), one transaction or statement
//     each. Their SQL is not here: internal/dialect writes every
//     statement, once per database (dialect.Statements).
//   - reads.go: the calls that read (IsLeader, Leader, ListCandidates)
//     and Guard, the fence of a leader's writes.
//   - prune.go: Prune, and the leader's prune every five expiry windows.
//   - clock.go: the database clock (Now), and the monotonic clock the
//     engine runs on, which tests stub.
//   - identity.go: who a candidate is (Identity, WithLabel), written with
//     every candidate row.
//   - history.go: the history of terms (written by the grants and ends in
//     protocol.go), the operators' read calls (Candidates, LeaderInfo,
//     History, ListNamespaces) and VacateSeat, VacateLease.
//   - fleet.go: the reads of every namespace at once for tools (ListSeats,
//     ListAllCandidates, ListProcesses, ListRecentTerms), and
//     ValidateNamespace.
//   - retry.go: where a call runs (the caller's transaction, statements of
//     their own, or a transaction of its own), retries of transient
//     conflicts, and how errors become the sentinels.
//   - seat.go: reading the leader row with the database clock, and the
//     leases this Election holds, for the one-statement renewal.
//   - stmtcache.go: statements kept prepared where compiling costs more
//     than running (SQLite), through internal/stmtcache.
//   - handoff.go: waking candidates when the seat is vacated, through
//     internal/handoff (in process, and through the database's
//     notifications), and the hooks that run in the vacating transaction.
//   - watch.go: WatchVacancies, the vacated seats for tools.
//   - engine.go: the state machine of one namespace (above): leadership,
//     trust window and watchdog, the lease's edge, the leader work,
//     give-ups and vacates after the work.
//   - sitout.go: the machine's sit-out: how it begins, which handoff
//     wake-up ends it early, and how a try started by a stale wake-up
//     resumes it.
//   - engine_work.go: the lock a driver's machines share and the observer
//     calls run after it, the callbacks' dispatcher, the counters of work
//     and calls in flight.
//   - rounds.go: what both drivers share: settings and their rules, the
//     round loop, its causes, jitter and backoff (internal/backoff, the
//     jittered backoff of every retry loop).
//   - elector.go: the Elector, driving one machine with one Elect a round.
//   - group.go: the Group, its namespaces (Join, Leave, Resign) and Run.
//   - group_round.go: the Group's batch round, prune and shutdown.
//   - group_attempt.go: the Group's attempts on free seats beside its
//     rounds, their budget (internal/pace), and balancing.
//   - observer.go: what Electors and Groups report to an Observer
//     (WithObserver), the stop reasons, and ErrorClass, the label of an
//     error in metrics.
//   - health.go: HealthCheck, the liveness check of an Elector or a Group
//     for probes, and the per-machine judgement it asks for.
package election
