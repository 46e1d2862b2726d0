package election

import (
	"slices"
	"testing"
)

// orderObserver records the namespace of each Attempt it is given.
type orderObserver struct {
	NopObserver
	got *[]string
}

func (o orderObserver) Attempt(a Attempt) { *o.got = append(*o.got, a.Namespace) }

// TestBoxNotesRunInOrder: the observer calls queued under a box's lock,
// attempts and others alike, run in the order they were queued once it is
// released, and a flush that queues attempts again allocates nothing: the
// notes' storage is kept from one flush to the next (a Group's round
// queues one for each of the thousands of seats it reads).
func TestBoxNotesRunInOrder(t *testing.T) {
	var (
		b   box
		got []string
	)
	o := orderObserver{got: &got}
	b.lock()
	b.noteAttempt(o, Attempt{Namespace: "a"})
	b.note(func() { got = append(got, "f") })
	b.noteAttempt(o, Attempt{Namespace: "b"})
	b.unlock()
	if want := []string{"a", "f", "b"}; !slices.Equal(got, want) {
		t.Fatalf("notes ran as %q, want %q", got, want)
	}

	// Queued from a note as it runs: run by the same flush, after it.
	got = got[:0]
	b.lock()
	b.note(func() {
		b.lock()
		b.noteAttempt(o, Attempt{Namespace: "inner"})
		b.unlock()
	})
	b.noteAttempt(o, Attempt{Namespace: "outer"})
	b.unlock()
	if want := []string{"outer", "inner"}; !slices.Equal(got, want) {
		t.Fatalf("notes ran as %q, want %q", got, want)
	}

	got = make([]string, 0, 4096)
	n := testing.AllocsPerRun(10, func() {
		got = got[:0]
		b.lock()
		for range 100 {
			b.noteAttempt(o, Attempt{Namespace: "x"})
		}
		b.unlock()
	})
	if n != 0 {
		t.Errorf("a flush of 100 attempts allocated %v times, want 0", n)
	}
}
