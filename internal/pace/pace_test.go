package pace

import "testing"

// TestBudget: a slow round sheds every attempt until a quick one, which
// allows one; each quick round doubles the budget up to Max, a failed
// attempt halves it, and the attempts spent count per round.
func TestBudget(t *testing.T) {
	b := New()
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
