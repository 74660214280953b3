package limiter

import (
	"slices"
	"sync"
	"time"
)

// fakeClock is a manual clock for tests: Now moves only when Advance is
// called, and timers made by newTimer fire when Advance reaches them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	when time.Time
	ch   chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 6, 1, 2, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// newTimer has the signature of AIMD.newTimer.
func (c *fakeClock) newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{when: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t.ch, func() bool { return false }
	}
	c.timers = append(c.timers, t)
	stop := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, t)
		if i < 0 {
			return false
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		return true
	}
	return t.ch, stop
}

// Advance moves the clock forward by d and fires every timer now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool {
		if t.when.After(c.now) {
			return false
		}
		t.ch <- c.now
		return true
	})
}

// Timers returns the number of pending (unfired, unstopped) timers.
func (c *fakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextTimer returns when the earliest pending timer fires, if any.
func (c *fakeClock) NextTimer() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(c.timers, func(a, b *fakeTimer) int { return a.when.Compare(b.when) }).when, true
}
