package dialect

import (
	"reflect"
	"strings"
	"testing"
)

// TestFleetLiveness: every expiry condition of the fleet statements comes
// from liveCandidate or liveLease, so that a change to what makes a
// candidate live reaches all of them; and how often each reads the
// clock.
func TestFleetLiveness(t *testing.T) {
	schemaPG, err := InSchema(postgres{}, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []Dialect{postgres{}, mysql{}, sqlite{}, schemaPG} {
		f := Fleet(d)
		if Fleet(d) != f {
			t.Errorf("%s: Fleet builds its statements again", d.Name())
		}
		v := reflect.ValueOf(f).Elem()
		now := d.(pieces).now()
		for i := range v.NumField() {
			name, q := v.Type().Field(i).Name, v.Field(i).String()
			// Take out the helpers' conditions and the effective expiries
			// candidateTime gives as values: no expiry condition is left.
			rest := q
			for _, a := range []string{"c", "e", "l"} {
				for _, n := range []string{"t.n", "u.n"} {
					rest = strings.ReplaceAll(rest, liveCandidate(a, n), "")
					rest = strings.ReplaceAll(rest, liveLease(a, n), "")
				}
				rest = strings.ReplaceAll(rest, candidateTime(a, "expires_at"), "")
			}
			if strings.Contains(rest, "expires_at >") || strings.Contains(rest, "expires_at <") {
				t.Errorf("%s %s: an expiry condition not from liveCandidate or liveLease:\n%s", d.Name(), name, q)
			}
			// One reading, and for Seats one more for its count of live
			// candidates.
			want := 1
			if name == "Seats" {
				want = 2
			}
			if n := strings.Count(q, now); n != want {
				t.Errorf("%s %s reads the clock %d times, want %d:\n%s", d.Name(), name, n, want, q)
			}
			if Schema(d) != "" && strings.Contains(q, " election_") {
				t.Errorf("%s %s names a table outside the schema:\n%s", d.Name(), name, q)
			}
		}
	}
}
