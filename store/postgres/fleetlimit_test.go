package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// instantClock fires every timer at once and records the waits asked of
// it: the test sees the fleet's schedule without sleeping.
type instantClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *instantClock) Now() time.Time { return time.Now() }
func (c *instantClock) NewTimer(d time.Duration) pipeline.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return firedTimer{}
}

// waitsOf is the waits asked while fn ran.
func (c *instantClock) waitsOf(fn func()) []time.Duration {
	c.mu.Lock()
	c.waits = nil
	c.mu.Unlock()
	fn()
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

type firedTimer struct{}

func (firedTimer) C() <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}
func (firedTimer) Stop() bool { return false }

func fleetLimiters(t *testing.T, n int, cfg FleetLimitConfig) []*FleetLimiter {
	t.Helper()
	_, u := openNew(t, Options{})
	out := make([]*FleetLimiter, n)
	for i, q := range clients(t, u, n) {
		l, err := NewFleetLimiter(context.Background(), q, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l
	}
	return out
}

func acquire(t *testing.T, l *FleetLimiter, n int) []time.Time {
	t.Helper()
	var out []time.Time
	for range n {
		s, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestFleetLimiter_OneDecreasePerEvent: every 429 of one event, on any
// worker, lowers each worker's limit once; a worker that got no 429
// decreases too, at its next call.
func TestFleetLimiter_OneDecreasePerEvent(t *testing.T) {
	ls := fleetLimiters(t, 3, FleetLimitConfig{Key: "p/m", Start: 16, Ceiling: 16, DecreaseFactor: 0.5, Clock: &instantClock{}})
	a, b, c := ls[0], ls[1], ls[2]
	sa, sb := acquire(t, a, 4), acquire(t, b, 4)
	acquire(t, c, 1)
	for _, s := range sa {
		a.RateLimited(s, time.Second)
	}
	for _, s := range sb[:2] {
		b.RateLimited(s, 0)
	}
	if a.Limit() != 8 || b.Limit() != 8 || c.Limit() != 16 {
		t.Fatalf("after one event (6 429s on two workers): limits %d, %d, %d; want 8, 8 and 16 (c has not called since)", a.Limit(), b.Limit(), c.Limit())
	}
	acquire(t, c, 1)
	if c.Limit() != 8 {
		t.Fatalf("c's limit after its next call = %d, want 8: one decrease for the fleet's event", c.Limit())
	}
	// Late 429s of calls reserved before the event change nothing.
	for _, s := range sb[2:] {
		b.RateLimited(s, 0)
	}
	if b.Limit() != 8 {
		t.Fatalf("late 429s of the same event moved b to %d", b.Limit())
	}
	// A second event, started by c.
	s := acquire(t, c, 1)
	c.RateLimited(s[0], 0)
	acquire(t, a, 1)
	if a.Limit() != 4 || c.Limit() != 4 {
		t.Fatalf("after a second event: a %d, c %d; want 4, 4", a.Limit(), c.Limit())
	}
}

// TestFleetLimiter_PacesTheFleet: with the rate known, two workers'
// calls are spaced one interval apart between them, not each.
func TestFleetLimiter_PacesTheFleet(t *testing.T) {
	clock := &instantClock{}
	ls := fleetLimiters(t, 2, FleetLimitConfig{Key: "p/m", RPM: 1, Start: 8, Clock: clock, BookAhead: time.Hour})
	for range 2 {
		for _, l := range ls {
			acquire(t, l, 1)
		}
	}
	want := []time.Duration{0, time.Minute, 2 * time.Minute, 3 * time.Minute}
	var got []time.Duration
	got = append(got, 0) // the first call does not wait: no timer
	got = append(got, clock.waits...)
	if len(got) != len(want) {
		t.Fatalf("waits %v, want about %v", got, want)
	}
	for i := range want {
		if d := got[i] - want[i]; d > time.Second || d < -5*time.Second {
			t.Errorf("call %d waited %s, want about %s", i, got[i], want[i])
		}
	}
}

// TestFleetLimiter_AloneWithoutTheDatabase: with the database gone the
// worker goes on, its own 429s lowering its limit.
func TestFleetLimiter_AloneWithoutTheDatabase(t *testing.T) {
	_, u := openNew(t, Options{})
	other := worker(t, u, "w")
	l, err := NewFleetLimiter(context.Background(), NewSharedQuota(other), FleetLimitConfig{Key: "p/m", Start: 10, DecreaseFactor: 0.5, Clock: &instantClock{}})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	s := acquire(t, l, 2)
	l.RateLimited(s[0], 0)
	l.Succeeded(s[1], 10)
	if l.Limit() != 5 || l.InFlight() != 0 {
		t.Fatalf("limit %d, in flight %d; want 5, 0", l.Limit(), l.InFlight())
	}
}

// steppedClock is instantClock whose Now the test sets.
type steppedClock struct {
	instantClock
	now time.Time
}

func (c *steppedClock) Now() time.Time { return c.now }

// TestFleetLimiter_IncreasePacedInTime: after the fleet's first
// congestion event, successes grow the limit by one per IncreaseEvery at
// most, however many there are.
func TestFleetLimiter_IncreasePacedInTime(t *testing.T) {
	clock := &steppedClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	ls := fleetLimiters(t, 1, FleetLimitConfig{Key: "p/m", Start: 8, Ceiling: 64, DecreaseFactor: 0.5, IncreaseEvery: time.Second, Clock: clock})
	l := ls[0]
	s := acquire(t, l, 1)
	l.RateLimited(s[0], 0)
	if l.Limit() != 4 {
		t.Fatalf("after the first event the limit is %d, want 4", l.Limit())
	}
	for _, step := range []struct {
		advance   time.Duration
		successes int
		want      int
	}{
		{100 * time.Millisecond, 50, 4},
		{time.Second, 50, 5},
		{500 * time.Millisecond, 50, 5},
		{500 * time.Millisecond, 1, 6},
	} {
		clock.now = clock.now.Add(step.advance)
		for range step.successes {
			s := acquire(t, l, 1)
			l.Succeeded(s[0], 1)
		}
		if l.Limit() != step.want {
			t.Fatalf("after %s more and %d successes the limit is %d, want %d", step.advance, step.successes, l.Limit(), step.want)
		}
	}
}

// TestFleetLimiter_NamedQuotaPacesTheFleet: a 429 naming its per-minute
// quota sets the fleet's pace: the other worker's next calls are spaced
// at 97% of it, though it never got a 429.
func TestFleetLimiter_NamedQuotaPacesTheFleet(t *testing.T) {
	clock := &instantClock{}
	ls := fleetLimiters(t, 2, FleetLimitConfig{Key: "p/m", Start: 8, Clock: clock, BookAhead: time.Hour})
	a, b := ls[0], ls[1]
	s := acquire(t, a, 1)
	a.RateLimitedQuota(s[0], 0, 60, 0) // 60 a minute
	waits := clock.waitsOf(func() { acquire(t, b, 3) })
	perMinute := 60.0
	every := time.Duration(float64(time.Minute) / (0.97 * perMinute))
	if len(waits) < 2 {
		t.Fatalf("b's calls waited %v: not paced", waits)
	}
	for i := 1; i < len(waits); i++ {
		if d := waits[i] - waits[i-1]; d < every-every/4 || d > every+every/4 {
			t.Errorf("b's calls %d and %d are %s apart, want %s (97%% of 60 a minute)", i-1, i, d, every)
		}
	}
}

// TestFleetLimiter_FreshQuotaIsNotUnreachable: a quota row no 429 has
// cooled yet holds '-infinity' as its cooldown; a paced call reads it
// before it goes, and that read must not fail: it once made every
// worker of a new fleet warn that the shared quota was unreachable.
func TestFleetLimiter_FreshQuotaIsNotUnreachable(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	clock := &instantClock{}
	ls := fleetLimiters(t, 2, FleetLimitConfig{Key: "p/m", RPM: 1, Start: 8, Clock: clock, BookAhead: time.Hour, Log: log})
	for range 2 {
		for _, l := range ls {
			acquire(t, l, 1)
		}
	}
	if len(clock.waits) == 0 {
		t.Fatal("no call waited for its slot: the test reads nothing")
	}
	if strings.Contains(logged.String(), "unreachable") {
		t.Fatalf("a fresh quota row was read as unreachable:\n%s", logged.String())
	}
}

// TestFleetLimiter_TimeoutWaveCutsThisWorker: a wave of one worker's
// timeouts (3, and 10% of its calls) caps its own calls in flight at
// half those then in flight, once for the wave; the other worker, whose
// calls did not time out, keeps its limit; and calls sent after the cut
// that time out again cut again. Before FleetLimiter read timeouts (it
// was no pipeline.TimeoutListener), the runner told them as Failed and
// nothing moved.
func TestFleetLimiter_TimeoutWaveCutsThisWorker(t *testing.T) {
	clock := &steppedClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	ls := fleetLimiters(t, 2, FleetLimitConfig{Key: "p/m", Start: 32, Ceiling: 64, Clock: clock})
	var lim pipeline.Limiter = ls[0]
	a, ok := lim.(pipeline.TimeoutListener)
	if !ok {
		t.Fatal("FleetLimiter is no pipeline.TimeoutListener: the runner tells it a timeout as any failure")
	}
	b := ls[1]
	sb := acquire(t, b, 10)
	sa := acquire(t, ls[0], 30)
	clock.now = clock.now.Add(2 * time.Second)
	a.TimedOut(sa[0])
	a.TimedOut(sa[1])
	if got := ls[0].Limit(); got != 32 {
		t.Fatalf("two timeouts moved the limit to %d: not a wave", got)
	}
	a.TimedOut(sa[2])
	if got := ls[0].Limit(); got != 14 {
		t.Fatalf("after a wave of 3 timeouts with 30 calls in flight the limit is %d, want 14 (half the 28 in flight at the third)", got)
	}
	for _, s := range sa[3:20] {
		a.TimedOut(s) // the rest of the wave, sent before the cut
	}
	if got := ls[0].Limit(); got != 14 || b.Limit() != 32 {
		t.Fatalf("after the rest of the wave: limits %d and %d, want 14 and 32 (the other worker's calls did not time out)", got, b.Limit())
	}
	for _, s := range sa[20:] {
		ls[0].Failed(s)
	}
	for _, s := range sb {
		b.Succeeded(s, 1)
	}
	clock.now = clock.now.Add(time.Second)
	sa = acquire(t, ls[0], 10)
	clock.now = clock.now.Add(2 * time.Second)
	for _, s := range sa[:3] {
		a.TimedOut(s)
	}
	if got := ls[0].Limit(); got != 4 {
		t.Fatalf("a second wave, of calls sent after the cut, left the limit at %d, want 4 (half the 8 in flight at its third)", got)
	}
}

// heldClock is a stepped clock whose timers, once hold is set, fire only
// when released: a call Acquire admitted waits in the fleet's schedule
// (book) for as long as the test says.
type heldClock struct {
	mu   sync.Mutex
	now  time.Time
	hold bool
	held []chan time.Time
}

func (c *heldClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *heldClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *heldClock) NewTimer(time.Duration) pipeline.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hold {
		return firedTimer{}
	}
	ch := make(chan time.Time, 1)
	c.held = append(c.held, ch)
	return heldTimer(ch)
}

// release fires the timers held and lets later ones fire at once.
func (c *heldClock) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	for _, ch := range c.held {
		ch <- c.now
	}
	c.held = nil
}

func (c *heldClock) holding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

type heldTimer chan time.Time

func (t heldTimer) C() <-chan time.Time { return t }
func (heldTimer) Stop() bool            { return false }

// TestFleetLimiter_TimeoutWaveCallsAdmittedBeforeTheCut: calls admitted
// before a wave's cut that were still waiting for their slot in the
// fleet's schedule go out after it, but at the level the cut answered:
// their timeouts are of that wave (one cut per wave, as the single
// process's law, whose decrease moves past the start stamps it handed
// out), not a second wave that halves the limit again.
func TestFleetLimiter_TimeoutWaveCallsAdmittedBeforeTheCut(t *testing.T) {
	clock := &heldClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	ls := fleetLimiters(t, 1, FleetLimitConfig{Key: "p/m", Start: 32, Ceiling: 64, Clock: clock})
	l := ls[0]
	sent := acquire(t, l, 20) // unpaced: out at once
	// The fleet is paced from now: the next calls wait for their slots.
	if err := l.q.SetRate(context.Background(), "p/m", 100*time.Millisecond, 1); err != nil {
		t.Fatal(err)
	}
	clock.mu.Lock()
	clock.hold = true
	clock.mu.Unlock()
	const booking = 10
	type got struct {
		started time.Time
		err     error
	}
	out := make(chan got, booking)
	for range booking {
		go func() {
			s, err := l.Acquire(context.Background())
			out <- got{s, err}
		}()
	}
	// Wait until every call is either out or waiting for its slot.
	var early []time.Time
	for deadline := time.Now().Add(30 * time.Second); clock.holding()+len(early) < booking; {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls waiting, %d out: the rest never reached the schedule", clock.holding(), len(early))
		}
		select {
		case g := <-out:
			if g.err != nil {
				t.Fatal(g.err)
			}
			early = append(early, g.started)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if clock.holding() < 3 {
		t.Fatalf("only %d calls waited for their slots: the test needs 3", clock.holding())
	}
	clock.advance(2 * time.Second)
	for _, s := range sent[:3] {
		l.TimedOut(s)
	}
	cut := l.Limit()
	if cut >= 32 {
		t.Fatalf("a wave of 3 timeouts left the limit at %d", cut)
	}
	for _, s := range append(sent[3:], early...) {
		l.Failed(s)
	}
	clock.advance(time.Millisecond)
	waiting := clock.holding()
	clock.release()
	var late []time.Time
	for range waiting {
		g := <-out
		if g.err != nil {
			t.Fatal(g.err)
		}
		late = append(late, g.started)
	}
	clock.advance(2 * time.Second)
	for _, s := range late[:3] {
		l.TimedOut(s)
	}
	if got := l.Limit(); got != cut {
		t.Fatalf("timeouts of calls admitted before the cut (sent after it, from the fleet's schedule) cut the limit again, from %d to %d", cut, got)
	}
}

// TestFleetLimiter_NamedQuotaContradicted: a 429 that names a minute's
// quota this worker alone has had more than twice answered in the last
// minute named some other window's count: the fleet is not paced at it
// (believed, "60 a minute" after 130 answers would pace every worker at
// a call a second). Twice the quota or less is believed: a fixed
// window's end and the next one's start.
func TestFleetLimiter_NamedQuotaContradicted(t *testing.T) {
	for _, tt := range []struct {
		answered int
		paced    bool
	}{{130, false}, {120, true}} {
		clock := &instantClock{}
		ls := fleetLimiters(t, 2, FleetLimitConfig{Key: "p/m", Start: 8, Clock: clock, BookAhead: time.Hour})
		a, b := ls[0], ls[1]
		for range tt.answered {
			s := acquire(t, a, 1)
			a.Succeeded(s[0], 0)
		}
		s := acquire(t, a, 1)
		a.RateLimitedQuota(s[0], 0, 60, 0) // 60 a minute
		waits := clock.waitsOf(func() { acquire(t, b, 3) })
		// Paced at 60 a minute, b's three calls are booked about a
		// second apart (their waits fall by the time between them);
		// unpaced, all at the cooldown's end.
		paced := len(waits) >= 2 && waits[len(waits)-1]-waits[0] > 500*time.Millisecond
		if paced != tt.paced {
			t.Errorf("after %d answers, a 429 naming 60 a minute: b's calls waited %v (paced %v), want paced %v", tt.answered, waits, paced, tt.paced)
		}
	}
}
