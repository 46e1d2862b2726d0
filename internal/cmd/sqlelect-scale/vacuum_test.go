package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVacuumsPrint(t *testing.T) {
	v := &vacuums{}
	v.add(100*time.Millisecond, nil)
	v.add(300*time.Millisecond, nil)
	v.add(time.Second, errors.New("canceled"))
	var b strings.Builder
	v.print(&b, 3*time.Second)
	want := "every 3s over the whole run: 2 ran, 200ms each on average, the longest 300ms; 1 failed"
	if !strings.Contains(b.String(), want) {
		t.Errorf("print wrote %q, want it to contain %q", b.String(), want)
	}

	b.Reset()
	(&vacuums{}).print(&b, time.Second)
	if want := ": 0 ran; 0 failed"; !strings.Contains(b.String(), want) {
		t.Errorf("print wrote %q, want it to contain %q", b.String(), want)
	}
}
