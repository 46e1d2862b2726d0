package dialect

import (
	"reflect"
	"strings"
	"testing"
)

// TestFleetLiveness: every expiry condition of the fleet statements comes
// from liveCandidate or liveLease, so that a change to what makes a
// candidate live reaches all of them; and each statement reads its
// clock once.
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
			conds := strings.Count(q, "expires_at >")
			helped := 0
			for _, a := range []string{"c", "e", "l"} {
				helped += strings.Count(q, liveCandidate(a, "t.n")) + strings.Count(q, liveLease(a, "t.n"))
			}
			if conds != helped {
				t.Errorf("%s %s: %d expiry conditions, %d of them from liveCandidate or liveLease:\n%s", d.Name(), name, conds, helped, q)
			}
			if n := strings.Count(q, now); n != 1 {
				t.Errorf("%s %s reads the clock %d times:\n%s", d.Name(), name, n, q)
			}
			if Schema(d) != "" && strings.Contains(q, " election_") {
				t.Errorf("%s %s names a table outside the schema:\n%s", d.Name(), name, q)
			}
		}
	}
}
