package pgtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine (a postmaster's waiter) outlives the
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
