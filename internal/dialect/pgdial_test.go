package dialect

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDialSlots: at most pgDialLimit attempts of a pool run at once; a
// caller waiting for a slot gives up with its context, taking no slot; a
// slot is freed when its attempt ends, however it ends.
func TestDialSlots(t *testing.T) {
	s := newDialSlots()
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	dial := func(ctx context.Context) (driver.Conn, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
			return nil, errors.New("refused")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Two attempts that wait for release, and callers that give up while
	// waiting for a slot.
	var wg sync.WaitGroup
	for range pgDialLimit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.connect(context.Background(), dial); err == nil {
				t.Error("the attempt succeeded")
			}
		}()
	}
	for inFlight.Load() < pgDialLimit {
		time.Sleep(time.Millisecond)
	}
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if _, err := s.connect(ctx, dial); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a caller waiting for a slot: %v, want its deadline", err)
		}
		cancel()
	}
	if n := most.Load(); n != pgDialLimit {
		t.Errorf("%d attempts at once, want %d", n, pgDialLimit)
	}
	close(release)
	wg.Wait()
	if len(s) != 0 {
		t.Fatalf("%d slots held after every attempt ended", len(s))
	}
	if _, err := s.connect(context.Background(), dial); err == nil || len(s) != 0 {
		t.Errorf("an attempt after: %v, %d slots held", err, len(s))
	}
}

// TestPGResetTimeout: the check of a pooled connection handed out again is
// bounded like a connection attempt: by the DSN's connect_timeout whenever
// it sets one (0 is no bound, as it is for the attempt), else by the
// caller's shorter bound or the default.
func TestPGResetTimeout(t *testing.T) {
	short := WithConnectTimeout(context.Background(), time.Second)
	long := WithConnectTimeout(context.Background(), time.Minute)
	for _, c := range []struct {
		dsn               string
		none, short, long time.Duration
	}{
		{"postgres://u@127.0.0.1/db", pgConnectTimeout, time.Second, pgConnectTimeout},
		{"postgres://u@127.0.0.1/db?connect_timeout=0", 0, 0, 0},
		{"postgres://u@127.0.0.1/db?connect_timeout=3", 3 * time.Second, 3 * time.Second, 3 * time.Second},
		{"postgres://u@127.0.0.1/db?connect_timeout=30", 30 * time.Second, 30 * time.Second, 30 * time.Second},
		{"host=127.0.0.1 user=u dbname=db connect_timeout=0", 0, 0, 0},
		{"host=127.0.0.1 user=u dbname=db connect_timeout=2", 2 * time.Second, 2 * time.Second, 2 * time.Second},
		{"host=127.0.0.1 user=u dbname=db", pgConnectTimeout, time.Second, pgConnectTimeout},
	} {
		o, err := Open(c.dsn)
		if err != nil {
			t.Fatalf("Open(%q): %v", c.dsn, err)
		}
		if o.ResetTimeout == nil {
			t.Fatalf("Open(%q): no ResetTimeout", c.dsn)
		}
		for _, k := range []struct {
			name string
			ctx  context.Context
			want time.Duration
		}{{"no bound", context.Background(), c.none}, {"a 1s bound", short, c.short}, {"a 1m bound", long, c.long}} {
			if got := o.ResetTimeout(k.ctx); got != k.want {
				t.Errorf("%q, a caller with %s: %v, want %v", c.dsn, k.name, got, k.want)
			}
		}
	}
}
