package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/sqlelect/sqlelect/internal/backoff"
	"github.com/sqlelect/sqlelect/internal/handoff"
)

// DefaultShutdownTimeout is the default ShutdownTimeout of ElectorConfig
// and GroupConfig.
const DefaultShutdownTimeout = 5 * time.Second

// timing is what the Elector and the Group share of their configuration:
// when rounds run and how long a lease is trusted. checkTiming fills in
// the defaults and checks the rules.
type timing struct {
	expire          time.Duration // the Election's expiry window
	interval        time.Duration // between rounds of a follower
	margin          time.Duration // the trust window is expire - margin
	shutdownTimeout time.Duration
}

// checkTiming applies the documented defaults and rules of Interval,
// SafetyMargin and ShutdownTimeout for an expiry window, naming every rule
// broken.
func checkTiming(expire, interval, margin, shutdown time.Duration) (timing, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
	}
	switch {
	case interval < 0:
		bad("Interval must be positive, got %v", interval)
	case interval == 0:
		interval = expire / 3
	case interval > expire/2:
		bad("Interval %v must be at most half the expiry window %v", interval, expire)
	}
	switch {
	case margin < 0:
		bad("SafetyMargin must be positive, got %v", margin)
	case margin == 0:
		margin = expire / 5
	}
	if len(errs) == 0 && margin >= expire-interval {
		bad("SafetyMargin %v must be less than the expiry window minus the interval (%v - %v), or no renewal fits in the trust window",
			margin, expire, interval)
	}
	switch {
	case shutdown < 0:
		bad("ShutdownTimeout must not be negative, got %v", shutdown)
	case shutdown == 0:
		shutdown = DefaultShutdownTimeout
	}
	return timing{expire: expire, interval: interval, margin: margin, shutdownTimeout: shutdown}, errors.Join(errs...)
}

// trust is how long a grant or renewal is trusted from the start of the
// round that obtained it.
func (t timing) trust() time.Duration { return t.expire - t.margin }

// slowRound is how long a Group's round may take before the Group judges
// the database slow and keeps one attempt a round, shedding the rest
// (paceLocked; heavyRound sheds them all): a quarter of the
// interval, or a tenth of the trust window when that is longer, so that
// an attempt of several round trips, each as slow, still fits in the trust
// window. With the default interval (a third of the expiry window) the two
// agree; a short interval under a long window no longer calls slow what
// the window has ample room for: a Group at Interval 200 ms on a database
// whose rounds took 60-100 ms (TiDB, on a busy machine) shed every attempt
// and led none of its namespaces.
func (t timing) slowRound() time.Duration { return max(t.interval/4, t.trust()/10) }

// heavyRound is how long a Group's round may take before the next renewal
// may miss the trust window: three eighths of it (carryLocked). A round
// between slowRound and this keeps one attempt a round (paceLocked); past
// it, none.
func (t timing) heavyRound() time.Duration { return t.trust() * 3 / 8 }

// renewEvery is how often a leader renews: by its lease, every third of
// the expiry window, or by Interval when that is longer. Followers poll
// every Interval, which may be much shorter; an idle leader does not.
func (t timing) renewEvery() time.Duration { return max(t.interval, t.expire/3) }

// jitter returns a duration between 0.8 d and d: candidates do not tick in
// lockstep, and none waits longer than d.
func jitter(d time.Duration) time.Duration {
	if spread := d / 5; spread > 0 {
		return d - rand.N(spread)
	}
	return d
}

// retryWait is the wait after failures consecutive failed rounds:
// Interval/8 (at least 1 ms) doubling up to Interval, ±20%.
func (t timing) retryWait(failures int) time.Duration {
	return backoff.Backoff{First: max(t.interval/8, time.Millisecond), Max: t.interval, Jitter: 0.2}.Wait(failures)
}

// roundCause says why a round, or an attempt on one seat, ran.
type roundCause int

const (
	causeStart      roundCause = iota + 1 // the first round of Run
	causeTick                             // the interval passed
	causeRetry                            // the backoff after a failed round passed
	causeWakeLocal                        // a seat vacated in this process
	causeWakeNotify                       // a notification from the database
	causeSitOut                           // a round during a sit-out: heartbeat and observe only
	causeEdge                             // the lease another candidate held has just ended
	causeOusted                           // another process vacated the term held
	causeRenew                            // a grant or renewal left less trust than one renewal period
)

func (c roundCause) String() string {
	switch c {
	case causeStart:
		return "start"
	case causeTick:
		return "tick"
	case causeRetry:
		return "retry"
	case causeWakeLocal:
		return "wake"
	case causeWakeNotify:
		return "notify"
	case causeSitOut:
		return "sit-out"
	case causeEdge:
		return "edge"
	case causeOusted:
		return "ousted"
	case causeRenew:
		return "renew"
	}
	return "unknown"
}

// wakeCause is the cause of a round or an attempt a handoff wake-up started.
func wakeCause(src handoff.Source) roundCause {
	if src == handoff.Notify {
		return causeWakeNotify
	}
	return causeWakeLocal
}

// edgeMargin is how long after the local deadline of a lease's end a
// follower tries: it covers the coarseness of timers; the first try
// counts from the time the reading was sent, the second from the time its
// answer came (machine.edgeLocked).
const edgeMargin = time.Millisecond

// edgeTries is how many tries a follower makes at the end of one lease
// (machine.edgeLocked). The first counts the remaining time from when the
// reading was sent, so it comes as early as the lease's end allows, but
// before it when the reading took longer to reach the database's clock
// than the try's own statement does (a busy host, a network's jitter).
// A first try that finds the lease still live arms the second, counted
// from when its own reading's answer came: never before the lease's end.
const edgeTries = 2

// driverLoop is what the round loop asks of a driver (an Elector, a
// Group).
type driverLoop interface {
	// round runs one round.
	round(ctx context.Context, cause roundCause) error
	// leadsAll reports whether every machine of the driver leads: the
	// rounds then renew by the leases, not poll every Interval.
	leadsAll() bool
	// signaled takes the signals pending on the kick channel and returns
	// the cause of the round they call for now (0: none), and whether a
	// sit-out began, whose tick, counted from now, only looks at the seat.
	signaled() (roundCause, bool)
}

// runRounds runs d's rounds until ctx ends: every Interval (jittered)
// while following, every renewal period while leading everywhere, at once
// when a signal calls for it, and after a failed round with a capped,
// jittered backoff, logged. It returns ctx's end as nil, and ErrNotMigrated
// when the tables are missing before any round succeeded.
func runRounds(ctx context.Context, d driverLoop, t timing, clk clock, kick <-chan struct{}, log *slog.Logger) error {
	cause := causeStart
	failures, succeeded := 0, false
	denied := "" // the privilege the failures so far lacked, logged once
	tm := clk.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		began := clk.Now()
		err := d.round(ctx, cause)
		if ctx.Err() != nil {
			return nil
		}
		// Ticks are counted from the start of the round, not its end: a
		// round slowed by the database leaves less wait, so that the next
		// renewal still answers within the trust window.
		wait, next := jitter(t.interval), causeTick
		if d.leadsAll() {
			wait = jitter(t.renewEvery())
		}
		wait = max(wait-clk.Now().Sub(began), 0)
		if err != nil {
			if !succeeded && errors.Is(err, ErrNotMigrated) {
				log.Error("election: stopped", "err", err)
				return err
			}
			failures++
			wait, next = t.retryWait(failures), causeRetry
			denied = logRoundFailure(log, err, failures, wait, denied)
		} else {
			succeeded, failures, denied = true, 0, ""
		}
		tm.Stop()
		tm.Reset(wait)
		for cause = 0; cause == 0; {
			select {
			case <-ctx.Done():
				return nil
			case <-tm.C():
				cause = next
			case <-kick:
				var restart bool
				if cause, restart = d.signaled(); cause == 0 && restart {
					// A sit-out began: its tick, from now, only looks.
					tm.Stop()
					tm.Reset(jitter(t.interval))
					next = causeSitOut
				}
			}
		}
	}
}

// logRoundFailure logs a failed round: at error level when nobody can lead
// until an operator acts (a read-only server; a privilege missing, named
// once per streak of failures, denied being the one already named), else
// as a warning. It returns the privilege named.
func logRoundFailure(log *slog.Logger, err error, failures int, retryIn time.Duration, denied string) string {
	switch missing := missingPrivilege(err); {
	case errors.Is(err, ErrReadOnly):
		log.Error("election: the database is read-only (a standby or a read-only server); nobody can lead until it accepts writes",
			"err", err, "failures", failures, "retry_in", retryIn)
	case errors.Is(err, ErrPermissionDenied) && (failures == 1 || missing != denied):
		log.Error("election: the database user lacks a privilege on the election tables; no candidate of this user can lead until it is granted",
			"missing", missing, "err", err, "failures", failures, "retry_in", retryIn)
		return missing
	default:
		log.Warn("election: round failed; retrying", "err", err, "failures", failures, "retry_in", retryIn)
	}
	return denied
}
