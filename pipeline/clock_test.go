package pipeline_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// virtualClock is a pipeline.Clock whose time moves only when the test
// advances it: every timer fires at its exact instant.
type virtualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*virtualTimer
}

var _ pipeline.Clock = (*virtualClock)(nil)

// epoch is where virtual clocks start.
var epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func newVirtualClock() *virtualClock { return &virtualClock{now: epoch} }

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since is the virtual time elapsed since epoch.
func (c *virtualClock) Since() time.Duration { return c.Now().Sub(epoch) }

func (c *virtualClock) NewTimer(d time.Duration) pipeline.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &virtualTimer{clock: c, at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// sleep waits d of virtual time.
func (c *virtualClock) sleep(ctx context.Context, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next is the instant of the earliest pending timer.
func (c *virtualClock) next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	return c.timers[0].at, true
}

// advanceTo moves the clock to at, firing every timer due by then.
func (c *virtualClock) advanceTo(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.After(c.now) {
		c.now = at
	}
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.c <- t.at
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

type virtualTimer struct {
	clock *virtualClock
	at    time.Time
	c     chan time.Time
}

func (t *virtualTimer) C() <-chan time.Time { return t.c }

func (t *virtualTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// maxVirtualTime is where a virtual-time test gives up: far beyond any
// test's needs, so a goroutine stuck outside the clock fails the test
// instead of letting the sampler's ticks run forever.
const maxVirtualTime = 6 * time.Hour

// inVirtualTime runs fn in a synctest bubble while a driver goroutine,
// whenever every other goroutine of the bubble is blocked, advances clock
// to its next timer: the code under test sees time pass exactly as its
// timers ask, and nothing sleeps. With everything blocked and no timer
// pending, the test fails as a deadlock.
func inVirtualTime(t *testing.T, fn func(t *testing.T, clock *virtualClock)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		clock := newVirtualClock()
		stop := make(chan struct{})
		driverDone := make(chan struct{})
		go func() {
			defer close(driverDone)
			for {
				synctest.Wait()
				select {
				case <-stop:
					return
				default:
				}
				at, ok := clock.next()
				if !ok {
					t.Errorf("deadlock at +%s: every goroutine is blocked and no timer is pending", clock.Since())
					return
				}
				if at.Sub(epoch) > maxVirtualTime {
					t.Errorf("virtual time ran past +%s: the code under test is stuck on something other than its clock", maxVirtualTime)
					return
				}
				clock.advanceTo(at)
			}
		}()
		defer func() {
			close(stop)
			<-driverDone
		}()
		fn(t, clock)
	})
}
