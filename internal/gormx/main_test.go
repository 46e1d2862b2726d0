package gormx_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package on leaked goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// GORM's prepared-statement cache (TestQuiet) starts an expiry
		// goroutine per handle that nothing can stop.
		goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"),
	)
}
