package handoff

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

// TestPayload: a payload reads back as the candidate and namespace it was
// made of, a namespace holding ':' included; anything else is refused.
func TestPayload(t *testing.T) {
	id := uuid.New()
	for _, ns := range []string{"jobs", "a:b", " "} {
		got, gotNS, ok := ParsePayload(Payload(id, ns))
		if !ok || got != id || gotNS != ns {
			t.Errorf("ParsePayload(Payload(%v, %q)) = %v, %q, %v", id, ns, got, gotNS, ok)
		}
	}
	for _, p := range []string{"", "jobs", id.String(), id.String() + "-jobs", "not-a-uuid-at-all-but-36-characters:x"} {
		if _, _, ok := ParsePayload(p); ok {
			t.Errorf("ParsePayload(%q) accepted", p)
		}
	}
}

// TestChannel: the search path has the plain channel; each schema its own,
// within PostgreSQL's 63 bytes however long the schema's name.
func TestChannel(t *testing.T) {
	if got := Channel(""); got != "sqlelect_handoff" {
		t.Errorf("Channel(\"\") = %q", got)
	}
	a, b := Channel("app"), Channel(strings.Repeat("s", 200))
	if a == Channel("") || a == b || a != Channel("app") {
		t.Errorf("channels: %q, %q", a, b)
	}
	if len(b) > 63 {
		t.Errorf("Channel of a long schema is %d bytes", len(b))
	}
}

type fakeMember struct {
	id uuid.UUID
	mu sync.Mutex
	ev []string
}

func (m *fakeMember) Candidate() uuid.UUID { return m.id }
func (m *fakeMember) Poke(src Source, vacated uuid.UUID) {
	m.add(fmt.Sprintf("poke %d %v", src, vacated == uuid.Nil))
}
func (m *fakeMember) PokeOusted() { m.add("ousted") }
func (m *fakeMember) WakeAny()    { m.add("any") }
func (m *fakeMember) add(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ev = append(m.ev, s)
}
func (m *fakeMember) events() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.ev, ",")
}

// TestWake: a vacancy pokes the hub's other members and tells the one
// that vacated its term ended; WakeAll reaches every namespace of the pool
// and schema, and nothing else; a hub without members is gone.
func TestWake(t *testing.T) {
	pool, other := new(int), new(int)
	a, b := &fakeMember{id: uuid.New()}, &fakeMember{id: uuid.New()}
	c, d := &fakeMember{id: uuid.New()}, &fakeMember{id: uuid.New()}
	ka := Key{Pool: pool, Namespace: "x"}
	kc := Key{Pool: pool, Namespace: "y"}
	kd := Key{Pool: other, Namespace: "x"}
	ha, hb := Join(ka, a, Listen{}), Join(ka, b, Listen{})
	if ha != hb || ha.Listening() != nil {
		t.Fatal("two hubs for one key, or a listener without a dialect")
	}
	hc, hd := Join(kc, c, Listen{}), Join(kd, d, Listen{})

	Wake(ka, Local, a.id)
	if a.events() != "ousted" || b.events() != "poke 1 false" || c.events() != "" || d.events() != "" {
		t.Fatalf("after a's vacancy: a %q, b %q, c %q, d %q", a.events(), b.events(), c.events(), d.events())
	}
	WakeAll(pool, "")
	if a.events() != "ousted,any" || b.events() != "poke 1 false,any" || c.events() != "any" || d.events() != "" {
		t.Fatalf("after WakeAll: a %q, b %q, c %q, d %q", a.events(), b.events(), c.events(), d.events())
	}
	Leave(ka, a, ha)
	if Lookup(ka) != hb {
		t.Fatal("the hub went with one of two members")
	}
	Leave(ka, b, hb)
	Leave(kc, c, hc)
	Leave(kd, d, hd)
	if Lookup(ka) != nil || Lookup(kc) != nil || Lookup(kd) != nil || Listeners(pool) != 0 {
		t.Fatal("hubs outlived their members")
	}
}

// TestVacancies: a reader that falls behind gets each namespace once, and
// one "" for all of them once too many are pending or any is.
func TestVacancies(t *testing.T) {
	v := &vacancies{kick: make(chan struct{}, 1), pending: map[string]struct{}{}}
	v.add("a")
	v.add("a")
	v.add("b")
	got := map[string]int{}
	for ns, ok := v.next(); ok; ns, ok = v.next() {
		got[ns]++
	}
	if len(got) != 2 || got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("read %v, want a and b once", got)
	}
	v.add("a")
	v.add("")
	v.add("b")
	if ns, ok := v.next(); !ok || ns != "" {
		t.Fatalf("after \"\": %q, %v", ns, ok)
	}
	if _, ok := v.next(); ok {
		t.Fatal("namespaces read after \"\" covered them")
	}
	for i := range maxPending + 1 {
		v.add(fmt.Sprint(i))
	}
	if ns, _ := v.next(); ns != "" {
		t.Fatalf("past %d pending: %q, want \"\"", maxPending, ns)
	}
}
