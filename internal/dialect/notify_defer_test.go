package dialect

import (
	"context"
	"testing"
)

// TestDeferNotifyWaits: a wait handed over under DeferNotifyWaits runs when
// the caller waits, once; without it the notifier is told to wait itself.
func TestDeferNotifyWaits(t *testing.T) {
	if deferNotifyWait(context.Background(), func() { t.Error("a wait ran without DeferNotifyWaits") }) {
		t.Error("deferNotifyWait took a wait from a plain context")
	}
	ctx, wait := DeferNotifyWaits(context.Background())
	ran := 0
	for range 2 {
		if !deferNotifyWait(ctx, func() { ran++ }) {
			t.Fatal("deferNotifyWait refused a wait under DeferNotifyWaits")
		}
	}
	if ran != 0 {
		t.Fatalf("%d waits ran before the caller waited", ran)
	}
	wait()
	wait()
	if ran != 2 {
		t.Errorf("%d waits ran, want 2, each once", ran)
	}
}
