package electiontest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	a  = uuid.MustParse("00000000-0000-4000-8000-00000000000a")
	b  = uuid.MustParse("00000000-0000-4000-8000-00000000000b")
	c  = uuid.MustParse("00000000-0000-4000-8000-00000000000c")
)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func lease(ns string, id uuid.UUID, term int64, acquired, expires int) election.Lease {
	return election.Lease{Namespace: ns, Leader: id, Term: term, AcquiredAt: at(acquired), ExpiresAt: at(expires)}
}

// step is one thing a crafted history does.
type step func(r *electiontest.Recorder)

func see(observer string, l election.Lease) step {
	return func(r *electiontest.Recorder) { r.Observe(observer, l) }
}

func released(l election.Lease) step {
	return func(r *electiontest.Recorder) { r.Released(l) }
}

func releasedBetween(ns string, id uuid.UUID, from, to time.Time) step {
	return func(r *electiontest.Recorder) { r.ReleasedBetween(ns, id, from, to) }
}

func wrote(ns string, counter, term int64, id uuid.UUID) step {
	return func(r *electiontest.Recorder) {
		r.Wrote(electiontest.Write{Namespace: ns, Counter: counter, Term: term, Leader: id})
	}
}

func TestChecker(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		want  map[electiontest.Kind]int // nil: no violations
	}{
		{name: "empty"},
		{
			name: "good: handover at expiry, renewals, vacancy, observers",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 100)),
				see("b", lease("ns", a, 1, 0, 100)),
				see("a", lease("ns", a, 1, 0, 150)), // renewal
				see("b", election.Lease{Namespace: "ns"}),
				see("b", lease("ns", b, 2, 150, 250)), // starts exactly when term 1 ends
				see("a", lease("ns", b, 2, 150, 250)),
				wrote("ns", 1, 1, a), wrote("ns", 2, 1, a), wrote("ns", 3, 2, b),
				wrote("ns", 3, 2, b), // recorded twice: by the writer and by Load
			},
		},
		{
			name: "good: a released term may end before its expiry",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 1000)),
				released(lease("ns", a, 1, 0, 1000)),
				see("b", lease("ns", b, 2, 10, 1010)),
			},
		},
		{
			name: "good: a release of an unknown term, bounded by the database clock",
			steps: []step{
				see("watcher", lease("ns", a, 1, 0, 1000)),
				releasedBetween("ns", a, at(400), at(600)),
				see("b", lease("ns", b, 2, 500, 1500)),
			},
		},
		{
			name: "good: a release with open bounds",
			steps: []step{
				see("watcher", lease("ns", a, 1, 0, 1000)),
				releasedBetween("ns", a, time.Time{}, time.Time{}),
				see("b", lease("ns", b, 2, 500, 1500)),
			},
		},
		{
			name: "overlap: the release window is another candidate's",
			steps: []step{
				see("watcher", lease("ns", a, 1, 0, 1000)),
				releasedBetween("ns", c, at(400), at(600)),
				see("b", lease("ns", b, 2, 500, 1500)),
			},
			want: map[electiontest.Kind]int{electiontest.Overlap: 1},
		},
		{
			name: "overlap: the release came after the lease had ended",
			steps: []step{
				see("watcher", lease("ns", a, 1, 0, 1000)),
				releasedBetween("ns", a, at(1100), at(1200)),
				see("b", lease("ns", b, 2, 500, 1500)),
			},
			want: map[electiontest.Kind]int{electiontest.Overlap: 1},
		},
		{
			name: "overlap: the release came before the term began",
			steps: []step{
				releasedBetween("ns", a, at(-300), at(-100)),
				see("watcher", lease("ns", a, 1, 0, 1000)),
				see("b", lease("ns", b, 2, 500, 1500)),
			},
			want: map[electiontest.Kind]int{electiontest.Overlap: 1},
		},
		{
			name: "good: namespaces are independent",
			steps: []step{
				see("a", lease("x", a, 1, 0, 1000)),
				see("b", lease("y", b, 1, 10, 1010)),
				see("b", lease("y", b, 2, 2000, 3000)),
				see("b", lease("x", a, 1, 0, 1000)), // lower term, other namespace
				wrote("x", 1, 1, a), wrote("y", 1, 2, b), wrote("x", 2, 1, a),
			},
		},
		{
			name: "good: terms seen out of number order by different observers",
			steps: []step{
				see("late", lease("ns", b, 2, 100, 200)),
				see("early", lease("ns", a, 1, 0, 100)),
			},
		},
		{
			name: "split: one term, two holders",
			steps: []step{
				see("a", lease("ns", a, 3, 0, 100)),
				see("b", lease("ns", b, 3, 0, 100)),
			},
			want: map[electiontest.Kind]int{electiontest.SplitTerm: 1},
		},
		{
			name: "split: one term granted twice",
			steps: []step{
				see("a", lease("ns", a, 3, 0, 100)),
				see("a", lease("ns", a, 3, 50, 150)),
			},
			want: map[electiontest.Kind]int{electiontest.SplitTerm: 1},
		},
		{
			name: "overlap: next term begins before the lease ends",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 100)),
				see("a", lease("ns", a, 1, 0, 180)),
				see("b", lease("ns", b, 2, 150, 250)),
			},
			want: map[electiontest.Kind]int{electiontest.Overlap: 1},
		},
		{
			name: "overlap: with an earlier term across an unseen one",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 1000)),
				see("c", lease("ns", c, 3, 500, 1500)),
			},
			want: map[electiontest.Kind]int{electiontest.Overlap: 1},
		},
		{
			name: "overlap: a later term that began before an earlier one",
			steps: []step{
				see("a", lease("ns", a, 1, 100, 200)),
				released(lease("ns", a, 1, 100, 200)),
				see("b", lease("ns", b, 2, 50, 300)),
			},
			want: map[electiontest.Kind]int{electiontest.Overlap: 1},
		},
		{
			name: "backwards: one observer sees term 2 after term 3",
			steps: []step{
				see("o", lease("ns", a, 2, 0, 100)),
				see("o", lease("ns", b, 3, 100, 200)),
				see("o", lease("ns", a, 2, 0, 100)),
			},
			want: map[electiontest.Kind]int{electiontest.Backwards: 1},
		},
		{
			name: "stale write: term 1 commits after term 2",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 100)),
				see("b", lease("ns", b, 2, 100, 200)),
				wrote("ns", 1, 1, a), wrote("ns", 2, 2, b), wrote("ns", 3, 1, a),
			},
			want: map[electiontest.Kind]int{electiontest.StaleWrite: 1},
		},
		{
			name: "stale write: one counter written twice",
			steps: []step{
				wrote("ns", 1, 1, a), wrote("ns", 1, 2, b),
			},
			want: map[electiontest.Kind]int{electiontest.StaleWrite: 1},
		},
		{
			name: "foreign write: a non-holder writes in a term",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 100)),
				wrote("ns", 1, 1, b),
			},
			want: map[electiontest.Kind]int{electiontest.ForeignWrite: 1},
		},
		{
			name: "every kind at once",
			steps: []step{
				see("a", lease("ns", a, 1, 0, 500)),
				see("b", lease("ns", b, 2, 100, 600)), // overlap
				see("c", lease("ns", c, 2, 100, 600)), // split
				see("a", lease("ns", a, 1, 0, 500)),
				see("a", lease("ns", c, 2, 100, 600)),
				see("a", lease("ns", a, 1, 0, 500)),        // backwards
				wrote("ns", 1, 2, b), wrote("ns", 2, 1, a), // stale
				wrote("ns", 3, 2, a), // foreign
			},
			want: map[electiontest.Kind]int{
				electiontest.SplitTerm: 1, electiontest.Overlap: 1, electiontest.Backwards: 1,
				electiontest.StaleWrite: 1, electiontest.ForeignWrite: 1,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := electiontest.NewRecorder()
			for _, s := range tc.steps {
				s(r)
			}
			res := r.Check()
			for k := electiontest.Kind(0); k <= electiontest.ForeignWrite; k++ {
				if got := res.Count(k); got != tc.want[k] {
					t.Errorf("%s: %d, want %d", k, got, tc.want[k])
				}
			}
			if len(tc.want) == 0 {
				if err := res.Err(); err != nil || !res.OK() {
					t.Fatalf("good history reported: %v", err)
				}
				if !strings.HasSuffix(res.String(), "no violations") {
					t.Errorf("String() = %q", res.String())
				}
				return
			}
			err := res.Err()
			if !errors.Is(err, electiontest.ErrViolation) {
				t.Fatalf("Err() = %v, want ErrViolation", err)
			}
			if len(res.Violations) != res.Total() {
				t.Errorf("%d violations listed, %d counted", len(res.Violations), res.Total())
			}
			for k := range tc.want {
				if !strings.Contains(res.String(), k.String()) {
					t.Errorf("String() = %q does not mention %s", res.String(), k)
				}
			}
			t.Log(err)
		})
	}
}

// The same checks through a History built by hand, as a user would from
// logs, and through a JSON round trip and a merge of two processes.
func TestHistoryByHandJSONAndMerge(t *testing.T) {
	h := electiontest.History{
		Terms: []electiontest.Term{
			{Namespace: "ns", Term: 1, Holders: []uuid.UUID{a}, AcquiredAt: at(0), ExpiresAt: at(100)},
			{Namespace: "ns", Term: 2, Holders: []uuid.UUID{b}, AcquiredAt: at(50), ExpiresAt: at(150)},
		},
		Seen:   []electiontest.Seen{{Observer: "o", Namespace: "ns", Terms: []int64{1, 2, 1}}},
		Writes: []electiontest.Write{{Namespace: "ns", Counter: 1, Term: 2, Leader: b}, {Namespace: "ns", Counter: 2, Term: 1, Leader: a}},
	}
	res := electiontest.Checker{}.Check(h)
	if res.Count(electiontest.Overlap) != 1 || res.Count(electiontest.Backwards) != 1 || res.Count(electiontest.StaleWrite) != 1 {
		t.Fatalf("by hand: %v", res)
	}

	// Two processes, each fine on its own, that together held term 5 twice.
	p1, p2 := electiontest.NewRecorder(), electiontest.NewRecorder()
	p1.Observe("p1", lease("ns", a, 5, 0, 100))
	p1.Observe("p1", lease("ns", a, 6, 100, 200))
	p2.Observe("p2", lease("ns", b, 5, 0, 100))
	for _, p := range []*electiontest.Recorder{p1, p2} {
		if !p.Check().OK() {
			t.Fatalf("one process alone: %v", p.Check())
		}
	}
	merged := electiontest.NewRecorder()
	for _, p := range []*electiontest.Recorder{p1, p2} {
		data, err := json.Marshal(p.History())
		if err != nil {
			t.Fatal(err)
		}
		var back electiontest.History
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		merged.Add(back)
	}
	res = merged.Check()
	if res.Count(electiontest.SplitTerm) != 1 || res.Total() != 1 {
		t.Fatalf("merged: %v", res)
	}
	if res.Observations != 3 || res.Terms != 2 {
		t.Fatalf("merged counts: %v", res)
	}
}

func TestMaxViolations(t *testing.T) {
	r := electiontest.NewRecorder()
	for i := 1; i <= 50; i++ {
		r.Wrote(electiontest.Write{Namespace: "ns", Counter: int64(i), Term: int64(100 - i), Leader: a})
	}
	res := electiontest.Checker{MaxViolations: 5}.Check(r.History())
	if res.Count(electiontest.StaleWrite) != 49 || len(res.Violations) != 5 {
		t.Fatalf("count %d, listed %d; want 49 and 5", res.Count(electiontest.StaleWrite), len(res.Violations))
	}
	if !strings.Contains(res.Err().Error(), "49 stale write") {
		t.Fatalf("Err() = %v", res.Err())
	}
}

// Participants record from many goroutines at once (run with -race).
func TestRecorderConcurrent(t *testing.T) {
	r := electiontest.NewRecorder()
	var wg sync.WaitGroup
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("p%d", p)
			for term := int64(1); term <= 200; term++ {
				id := uuid.NewSHA1(uuid.Nil, []byte(fmt.Sprint(term)))
				l := election.Lease{Namespace: "ns", Leader: id, Term: term,
					AcquiredAt: at(int(term) * 10), ExpiresAt: at(int(term)*10 + 10)}
				r.Observe(name, l)
				if p == 0 {
					r.Wrote(electiontest.Write{Namespace: "ns", Counter: term, Term: term, Leader: id})
				}
				if term%50 == 0 {
					_ = r.History()
				}
			}
		}()
	}
	wg.Wait()
	res := r.Check()
	if !res.OK() || res.Terms != 200 || res.Observations != 1600 || res.Writes != 200 {
		t.Fatalf("%v: %v", res, res.Err())
	}
}
