package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// levels records the level of each log line.
type levels struct {
	mu  sync.Mutex
	got []slog.Level
}

func (h *levels) Enabled(context.Context, slog.Level) bool { return true }
func (h *levels) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, r.Level)
	return nil
}
func (h *levels) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levels) WithGroup(string) slog.Handler      { return h }

// TestLogRoundFailureNamesPrivilegeOnce: a streak of rounds refused a
// privilege logs at error level once, naming what is missing, and again
// only when what is missing changes; the other failures are warnings, a
// read-only server is an error every time.
func TestLogRoundFailureNamesPrivilegeOnce(t *testing.T) {
	h := &levels{}
	log := slog.New(h)
	denied := func(missing string) error {
		return &deniedError{missing: missing, err: fmt.Errorf("%w: Elect: %s", ErrPermissionDenied, missing)}
	}
	named := ""
	for i, err := range []error{denied("INSERT"), denied("INSERT"), denied("INSERT, UPDATE"), errors.New("cut"), denied("INSERT, UPDATE")} {
		named = logRoundFailure(log, err, i+1, time.Millisecond, named)
	}
	named = logRoundFailure(log, fmt.Errorf("%w: x", ErrReadOnly), 6, time.Millisecond, named)
	logRoundFailure(log, fmt.Errorf("%w: x", ErrReadOnly), 7, time.Millisecond, named)
	want := []slog.Level{slog.LevelError, slog.LevelWarn, slog.LevelError, slog.LevelWarn, slog.LevelWarn, slog.LevelError, slog.LevelError}
	if fmt.Sprint(h.got) != fmt.Sprint(want) {
		t.Errorf("levels %v, want %v", h.got, want)
	}
}
