package dialect

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestSQLiteAvailability: SQLite works exactly when the program has cgo,
// and otherwise both ways in (a DSN, a handle's settings check) say that cgo
// is what is missing.
func TestSQLiteAvailability(t *testing.T) {
	if msg := ErrSQLiteNeedsCgo.Error(); !strings.Contains(msg, "cgo") || !strings.Contains(msg, "CGO_ENABLED=1") {
		t.Errorf("ErrSQLiteNeedsCgo does not say how to fix it: %q", msg)
	}
	_, openErr := Open("sqlite::memory:")
	if !cgoEnabled {
		if !errors.Is(openErr, ErrSQLiteNeedsCgo) {
			t.Errorf("Open(sqlite::memory:) without cgo = %v, want ErrSQLiteNeedsCgo", openErr)
		}
		if _, err := (sqlite{}).Check(context.Background(), nil); !errors.Is(err, ErrSQLiteNeedsCgo) {
			t.Errorf("Check without cgo = %v, want ErrSQLiteNeedsCgo", err)
		}
		return
	}
	if openErr != nil {
		t.Errorf("Open(sqlite::memory:) with cgo: %v", openErr)
	}
}
