package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
)

// maxHistoryProblems caps the problems one namespace reports.
const maxHistoryProblems = 10

// checkHistory compares the history table of e's namespace with the seat's
// term and with what the processes reported (h): every term from 1 to the
// seat's is there, once, in order; every term but the last is recorded as
// ended, before the next began; and every term a process saw held is
// recorded with that holder and start. Terms granted to a process killed
// before it could report are in the history only, which is fine. It
// returns how many terms the history holds and what did not match.
func checkHistory(ctx context.Context, e *election.Election, seatTerm int64, h electiontest.History) (int, []string, error) {
	terms, err := e.History(ctx, 1_000_000)
	if err != nil {
		return 0, nil, err
	}
	ns := e.Namespace()
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < maxHistoryProblems {
			problems = append(problems, fmt.Sprintf("%s: ", ns)+fmt.Sprintf(format, args...))
		}
	}
	if int64(len(terms)) != seatTerm {
		problem("the history has %d terms, the seat is at term %d", len(terms), seatTerm)
	}
	byTerm := map[int64]election.TermRecord{}
	for i, r := range terms {
		if want := seatTerm - int64(i); r.Term != want {
			problem("history[%d] is term %d, want %d (a gap)", i, r.Term, want)
			break
		}
		byTerm[r.Term] = r
		if i == 0 {
			continue
		}
		next := terms[i-1]
		switch {
		case !r.Ended():
			problem("term %d is not recorded as ended, though term %d followed", r.Term, next.Term)
		case next.AcquiredAt.Before(r.EndedAt):
			problem("term %d began at %v, before term %d ended at %v", next.Term, next.AcquiredAt, r.Term, r.EndedAt)
		}
	}
	for _, t := range h.Terms {
		if t.Namespace != ns {
			continue
		}
		r, ok := byTerm[t.Term]
		switch {
		case !ok:
			problem("term %d was seen held by %v but is not in the history", t.Term, t.Holders)
		case !slices.Equal(t.Holders, []uuid.UUID{r.Leader}):
			problem("term %d: the history names %s, the processes saw %v", t.Term, r.Leader, t.Holders)
		case !t.AcquiredAt.IsZero() && !t.AcquiredAt.Equal(r.AcquiredAt):
			problem("term %d: the history says it began at %v, the processes were told %v", t.Term, r.AcquiredAt, t.AcquiredAt)
		}
	}
	return len(terms), problems, nil
}
