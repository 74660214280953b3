package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind. The
// tests' walks release on their count alone (releaseAbove 0): a test
// process's resident file pages are far below the bound, and the tests
// that count releases set releaseEvery; TestWalker_releasesPastResident
// sets the bound itself.
func TestMain(m *testing.M) {
	releaseAbove = 0
	goleak.VerifyTestMain(m)
}
