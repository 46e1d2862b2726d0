package pace

import (
	"testing"
	"time"
)

// TestBudget: a slow round sheds every attempt until a quick one, which
// allows one; each quick round doubles the budget up to Max, a failed
// attempt halves it, and the attempts spent count per round.
func TestBudget(t *testing.T) {
	b := New(firstJoins)
	if !b.Quick() || !b.Spend() {
		t.Fatal("a new budget allows attempts")
	}
	if !b.Round(true) {
		t.Error("the first slow round did not report the shedding's start")
	}
	if b.Round(true) {
		t.Error("a second slow round reported the shedding's start again")
	}
	if b.Quick() || b.Spend() {
		t.Fatal("a slow round left attempts allowed")
	}
	b.Round(false)
	if !b.Spend() || b.Spend() {
		t.Fatal("the first quick round after shedding allows exactly one attempt")
	}
	b.Round(false)
	b.Round(false)
	for i := range 4 {
		if !b.Spend() {
			t.Fatalf("attempt %d of 4 refused after two more quick rounds", i+1)
		}
	}
	if b.Spend() {
		t.Error("a fifth attempt allowed with a budget of 4")
	}
	b.Failed()
	b.Round(false) // 2*2
	for range 4 {
		b.Spend()
	}
	if b.Spend() {
		t.Error("the budget did not halve after a failed attempt")
	}
	for range 40 {
		b.Round(false)
	}
	if b.allowed != Max {
		t.Errorf("budget %d after many quick rounds, want Max %d", b.allowed, Max)
	}
}

// TestBatch: a batch take begins at FirstBatch seats per round, doubles
// with each quick round, comes back to FirstBatch after a slow one, halves
// (not below FirstBatch) after a failure, and the seats taken count until
// the next round.
func TestBatch(t *testing.T) {
	b := New(firstJoins)
	if got := b.Batch(); got != FirstBatch {
		t.Fatalf("a new budget's batch is %d seats, want %d", got, FirstBatch)
	}
	b.Took(FirstBatch - 8)
	if got := b.Batch(); got != 8 {
		t.Fatalf("%d seats left of the round's batch after taking %d, want 8", got, FirstBatch-8)
	}
	b.Took(8)
	if got := b.Batch(); got != 0 {
		t.Fatalf("%d seats left once the round's batch is taken, want 0", got)
	}
	b.Round(false)
	b.Round(false)
	if got := b.Batch(); got != 4*FirstBatch {
		t.Fatalf("batch %d after two quick rounds, want %d", got, 4*FirstBatch)
	}
	b.Failed()
	if got := b.Batch(); got != 2*FirstBatch {
		t.Fatalf("batch %d after a failure, want %d", got, 2*FirstBatch)
	}
	b.Failed()
	b.Failed()
	if got := b.Batch(); got != FirstBatch {
		t.Fatalf("batch %d after three failures, want at least %d", got, FirstBatch)
	}
	for range 3 {
		b.Round(false)
	}
	b.Round(true)
	if got := b.Batch(); got != FirstBatch {
		t.Fatalf("batch %d after a slow round, want %d", got, FirstBatch)
	}
	for range 40 {
		b.Round(false)
	}
	if got := b.Batch(); got != Max {
		t.Errorf("batch %d after many quick rounds, want Max %d", got, Max)
	}
}

// TestSlowed: a round slow within the renewals' cadence keeps one attempt
// of at most FirstBatch seats until the next round, whatever the budget
// was (shed or Max); it is not quick, sheds nothing, reports no shedding,
// halves the candidate rows, leaves the bound on the seats kept where it
// is, and a quick round after it doubles the budget from one.
func TestSlowed(t *testing.T) {
	for _, shed := range []bool{false, true} {
		b := New(firstJoins)
		for range 4 {
			b.Round(false)
		}
		if shed {
			b.Round(true)
		}
		b.Heavy(1000, time.Second, 250*time.Millisecond)
		joins := b.Joins()
		b.Slowed()
		if b.Quick() || b.Sheds() || b.Overloaded() {
			t.Errorf("shed before %v: after a slowed round quick %v, sheds %v, overloaded %v; want false, false, false",
				shed, b.Quick(), b.Sheds(), b.Overloaded())
		}
		if got := b.Batch(); got != FirstBatch {
			t.Errorf("shed before %v: a slowed round's batch is %d seats, want %d", shed, got, FirstBatch)
		}
		if got, want := b.Joins(), max(joins/2, firstJoins); got != want {
			t.Errorf("shed before %v: %d candidate rows after a slowed round, want %d", shed, got, want)
		}
		if got := b.Carry(); got != 250 {
			t.Errorf("shed before %v: the seats kept bounded at %d after a slowed round, want 250", shed, got)
		}
		if !b.Spend() || b.Spend() {
			t.Errorf("shed before %v: a slowed round allows exactly one attempt", shed)
		}
		b.Round(false)
		if !b.Quick() || b.Batch() != 2*FirstBatch {
			t.Errorf("shed before %v: a quick round after a slowed one: quick %v, batch %d; want true, %d", shed, b.Quick(), b.Batch(), 2*FirstBatch)
		}
		spent := 0
		for b.Spend() {
			spent++
		}
		if spent != 2 {
			t.Errorf("shed before %v: a quick round after a slowed one allows %d attempts, want 2", shed, spent)
		}
		b.Failed()
		b.Slowed()
		b.Failed()
		if !b.Sheds() {
			t.Errorf("shed before %v: a failed attempt after a slowed round leaves attempts allowed", shed)
		}
	}
}

// TestJoinsGrew: after a slow round, slowed or shedding, JoinsGrew
// doubles the candidate rows from the round's budget and leaves the
// attempts as the round set them; it never lowers the rows, and stops at
// Max.
func TestJoinsGrew(t *testing.T) {
	for _, shed := range []bool{false, true} {
		b := New(firstJoins)
		b.Round(false)
		joins := b.Joins()
		if shed {
			b.Round(true)
		} else {
			b.Slowed()
		}
		b.JoinsGrew(joins)
		if got := b.Joins(); got != 2*joins {
			t.Errorf("shed %v: %d candidate rows after a slow round that grew them, want %d", shed, got, 2*joins)
		}
		if got := b.Sheds(); got != shed {
			t.Errorf("shed %v: the attempts shed %v after JoinsGrew", shed, got)
		}
		if !shed && (b.Batch() != FirstBatch || !b.Spend() || b.Spend()) {
			t.Errorf("a slowed round that grew the rows: batch %d, want %d and exactly one attempt", b.Batch(), FirstBatch)
		}
	}
	b := New(firstJoins)
	for range 20 {
		b.Round(false)
	}
	b.JoinsGrew(firstJoins)
	if got := b.Joins(); got != Max {
		t.Errorf("JoinsGrew lowered the candidate rows to %d from Max", got)
	}
	for range 20 {
		b.JoinsGrew(b.Joins())
	}
	if got := b.Joins(); got != Max {
		t.Errorf("candidate rows grown to %d, want Max (%d)", got, Max)
	}
}

// firstJoins is the first rows' number the tests give New.
const firstJoins = 1024

func TestJoins(t *testing.T) {
	b := New(firstJoins)
	if got := b.Joins(); got != firstJoins {
		t.Fatalf("a new budget's round writes %d candidate rows, want %d", got, firstJoins)
	}
	b.Round(false)
	b.Round(false)
	if got := b.Joins(); got != 4*firstJoins {
		t.Fatalf("%d rows after two quick rounds, want %d", got, 4*firstJoins)
	}
	b.Failed() // an attempt's failure leaves the rows alone
	if got := b.Joins(); got != 4*firstJoins {
		t.Fatalf("%d rows after a failed attempt, want %d", got, 4*firstJoins)
	}
	b.Round(true)
	if got := b.Joins(); got != 2*firstJoins {
		t.Fatalf("%d rows after a slow round, want half, %d", got, 2*firstJoins)
	}
	b.Round(true)
	b.Round(true)
	if got := b.Joins(); got != firstJoins {
		t.Fatalf("%d rows after three slow rounds, want at least %d", got, firstJoins)
	}
	b.Round(false) // the first quick round after slow ones
	if got := b.Joins(); got != 2*firstJoins {
		t.Fatalf("%d rows after a quick round, want %d", got, 2*firstJoins)
	}
	for range 40 {
		b.Round(false)
	}
	if got := b.Joins(); got != Max {
		t.Errorf("%d rows after many quick rounds, want Max %d", got, Max)
	}
}

// TestCarry: no bound at first; a heavy round bounds the seats kept in
// proportion to its time, never above a bound already set; a slow round
// keeps the bound, each quick round raises it by a thirty-second (one seat at
// least), and it is lifted at Max.
func TestCarry(t *testing.T) {
	b := New(firstJoins)
	if b.Carry() != 0 || !b.Carries(Max) {
		t.Fatal("a new budget bounds the seats kept")
	}
	if n, lowered := b.Heavy(100, 800*time.Millisecond, 200*time.Millisecond); n != 25 || !lowered {
		t.Fatalf("Heavy(100 seats, 800 ms, target 200 ms) = %d, %v; want 25, true", n, lowered)
	}
	if !b.Carries(25) || b.Carries(26) {
		t.Fatal("the bound of 25 does not hold")
	}
	if b.Room(20) != 5 || b.Room(30) != 0 {
		t.Fatalf("room %d and %d under a bound of 25 for 20 and 30 seats, want 5 and 0", b.Room(20), b.Room(30))
	}
	if n, lowered := b.Heavy(100, 400*time.Millisecond, 200*time.Millisecond); n != 25 || lowered {
		t.Fatalf("a heavy round over more seats raised the bound: %d, %v", n, lowered)
	}
	if n, _ := b.Heavy(3, time.Second, 200*time.Millisecond); n != 1 {
		t.Fatalf("bound %d, want one seat at least", n)
	}
	b.Round(true)
	if b.Carry() != 1 {
		t.Fatalf("a slow round moved the bound to %d", b.Carry())
	}
	if !b.Overloaded() {
		t.Fatal("bounded and shedding, but not overloaded")
	}
	b.Round(false)
	b.Round(false)
	if b.Carry() != 3 {
		t.Fatalf("bound %d after two quick rounds from one, want 3", b.Carry())
	}
	for range 10000 {
		b.Round(false)
	}
	if b.Carry() != 0 || !b.Carries(Max) || b.Room(Max) != Max || b.Overloaded() {
		t.Fatalf("bound %d after many quick rounds, want none", b.Carry())
	}
}
