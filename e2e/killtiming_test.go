package e2e

import (
	"testing"
	"time"
)

// TestHeldClock_standsStillThenRunsOnWithoutAJump: while held, the
// simulator's clock does not move (a job created then stays PENDING
// however late it is polled); released, it runs on from where it stood,
// neither jumping ahead by the time it stood still nor going back.
func TestHeldClock_standsStillThenRunsOnWithoutAJump(t *testing.T) {
	c := newHeldClock()
	at := c.Now()
	for range 1000 {
		if now := c.Now(); !now.Equal(at) {
			t.Fatalf("a held clock moved: %v after %v", now, at)
		}
	}
	t0 := time.Now()
	c.release()
	after := c.Now()
	t1 := time.Now()
	if after.Before(at) {
		t.Errorf("released, the clock went back: %v < %v", after, at)
	}
	// It ran on from at: by no more than the wall clock since the release.
	if ran, wall := after.Sub(at), t1.Sub(t0); ran > wall {
		t.Errorf("released, the clock jumped ahead: it ran %v from where it stood, %v passed since the release", ran, wall)
	}
	c.release() // a second release changes nothing
	if now := c.Now(); now.Before(after) {
		t.Errorf("a second release sent the clock back: %v < %v", now, after)
	}
}
