package election

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// countingHandler counts the WithAttrs calls made on it.
type countingHandler struct {
	slog.Handler
	mu    sync.Mutex
	withs int
}

func (h *countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.mu.Lock()
	h.withs++
	h.mu.Unlock()
	return h.Handler.WithAttrs(attrs)
}

func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.withs
}

// TestWithAttrsLater checks that a logger made by withAttrsLater writes
// what l.With writes, through further With and WithGroup calls too, and
// that it formats its attributes only once it logs.
func TestWithAttrsLater(t *testing.T) {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	var want, got bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime}
	eager := slog.New(slog.NewTextHandler(&want, opts)).With("namespace", "a.b", "candidate", 7)
	counting := &countingHandler{Handler: slog.NewTextHandler(&got, opts)}
	lazy := withAttrsLater(slog.New(counting), slog.String("namespace", "a.b"), slog.Int("candidate", 7))

	if n := counting.count(); n != 0 {
		t.Fatalf("WithAttrs called %d times before anything was logged; want 0", n)
	}
	if lazy.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("Enabled(Debug) = true under a handler at Info")
	}
	lazy.Debug("not written")
	if n := counting.count(); n != 0 {
		t.Fatalf("WithAttrs called %d times by a disabled record; want 0", n)
	}
	for _, l := range []struct{ eager, lazy *slog.Logger }{
		{eager, lazy},
		{eager.With("term", 3), lazy.With("term", 3)},
		{eager.WithGroup("g").With("k", "v"), lazy.WithGroup("g").With("k", "v")},
	} {
		l.eager.Warn("stepping down", "err", "slow")
		l.lazy.Warn("stepping down", "err", "slow")
	}
	if got.String() != want.String() {
		t.Fatalf("the lazy logger wrote\n%s\nwant\n%s", got.String(), want.String())
	}
	if !strings.Contains(got.String(), `namespace=a.b candidate=7 err=slow`) {
		t.Fatalf("no attributes in %q", got.String())
	}
	if n := counting.count(); n != 1 {
		t.Fatalf("WithAttrs called %d times on the base handler; want 1 (the deferred attributes, once)", n)
	}

	// Many goroutines logging at once format the attributes once.
	counting = &countingHandler{Handler: slog.NewTextHandler(&bytes.Buffer{}, opts)}
	lazy = withAttrsLater(slog.New(counting), slog.String("namespace", "a.b"))
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lazy.Info("x")
		}()
	}
	wg.Wait()
	if n := counting.count(); n != 1 {
		t.Fatalf("WithAttrs called %d times by 16 goroutines; want 1", n)
	}
}
