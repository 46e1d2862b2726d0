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
