package pipeline

import (
	"context"
	"time"
)

// Clock is the runner's one source of time: the instants it stamps on dead
// letters and samples, and every wait it makes (backoff between retries,
// the grace period after a stop, the sampling period, the age of the
// commit backlog). Tests inject a virtual clock and advance it exactly;
// the zero Runner uses the system clock. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now is the current instant.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now. A d <= 0
	// fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	// C delivers the firing instant, once.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so
	// (false: it had already fired or been stopped).
	Stop() bool
}

// SystemClock is the Clock of time.Now and time.NewTimer.
type SystemClock struct{}

// Now is time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer(d).
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time { return s.t.C }
func (s systemTimer) Stop() bool          { return s.t.Stop() }

// sleep waits d on clock, or until ctx is done; it reports whether the
// whole wait passed (false: ctx is done).
func sleep(ctx context.Context, clock Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}
