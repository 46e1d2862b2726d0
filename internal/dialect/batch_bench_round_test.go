package dialect_test

import (
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// benchRound is the round BenchmarkBatchRound times, with its arguments:
// names' seats and heartbeats, the renewal of held in terms, as me.
func benchRound(d dialect.Dialect, names, held []string, terms []int64, me uuid.UUID, live bool) (string, []any) {
	q, _ := dialect.BatchRound(d, len(names), len(held) > 0, live)
	args := []any{d.DurationArg(time.Hour), me, "host", 1, "", dialect.TextArray(names)}
	if len(held) > 0 {
		args = append(args, dialect.TextArray(held), dialect.Int64Array(terms))
	}
	return q, args
}
