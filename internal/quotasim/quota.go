package quotasim

import (
	"math"
	"sort"
	"time"
)

// Epoch is virtual time zero: every run starts at it.
var Epoch = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

// Retry is what a 429 says about when to retry.
type Retry int

const (
	// Exact: RetryInfo carries the exact time until a call would be admitted.
	Exact Retry = iota
	// Coarse: whole seconds, rounded up and a second late (as Gemini sends).
	Coarse
	// Absent: no RetryInfo, a bare 429.
	Absent
)

func (m Retry) String() string { return [...]string{"exact", "coarse", "absent"}[m] }

// delay is the retry delay a 429 carries when the true wait is d.
func (m Retry) delay(d time.Duration) time.Duration {
	switch m {
	case Exact:
		return max(d, time.Millisecond)
	case Coarse:
		return (d/time.Second + 2) * time.Second
	}
	return 0
}

// Drift is a schedule of quota percentages: Pct from At (since Epoch) on;
// 100 before the first step.
type Drift []Step

// Step is one step of a Drift.
type Step struct {
	At  time.Duration
	Pct int
}

// pctAt is the quota's percentage at t.
func (d Drift) pctAt(t time.Time) int {
	pct, since := 100, t.Sub(Epoch)
	for _, st := range d {
		if since >= st.At {
			pct = st.Pct
		}
	}
	return pct
}

// Quota counts what a server admitted. Admit decides a call of cost units
// (1 for a request quota, its input tokens for a token quota) arriving at
// t, and when it refuses, the true time until it would be admitted. Next
// is the earliest instant from t at which Admit would accept it, for the
// perfect client; Next does not change what is counted.
type Quota interface {
	Admit(t time.Time, cost int) (ok bool, wait time.Duration)
	Next(t time.Time, cost int) time.Time
}

// SlidingLog admits Limit units in any Window-long span. With Charged, a
// refused call is counted too, as some quota systems do: a client that
// keeps knocking keeps the door shut.
type SlidingLog struct {
	Limit   int
	Window  time.Duration
	Drift   Drift
	Charged bool
	// log holds what was counted, oldest first, from head on; each entry
	// keeps the running total of every cost counted up to and including
	// it, so the sum in the window and the instant enough of it expires
	// are a subtraction and a binary search.
	log  []entry
	head int
}

type entry struct {
	at    time.Time
	total int
}

func (s *SlidingLog) trim(t time.Time) {
	for s.head < len(s.log) && !s.log[s.head].at.Add(s.Window).After(t) {
		s.head++
	}
	if s.head > 1024 && s.head > len(s.log)/2 {
		// Keep the entry before the window: its running total is what
		// the window's sum is counted from (see before).
		s.log = append(s.log[:0], s.log[s.head-1:]...)
		s.head = 1
	}
}

// before is the running total before the window's oldest entry.
func (s *SlidingLog) before() int {
	if s.head == 0 {
		return 0
	}
	return s.log[s.head-1].total
}

func (s *SlidingLog) sum() int {
	if s.head == len(s.log) {
		return 0
	}
	return s.log[len(s.log)-1].total - s.before()
}

func (s *SlidingLog) add(t time.Time, cost int) {
	total := cost
	if len(s.log) > 0 {
		total += s.log[len(s.log)-1].total
	}
	s.log = append(s.log, entry{t, total})
}

// room is when a call of cost would fit, from t (trimmed): t itself when
// it fits.
func (s *SlidingLog) room(t time.Time, cost int) time.Time {
	lim := s.Limit * s.Drift.pctAt(t) / 100
	free := s.sum() + cost - lim
	if free <= 0 {
		return t
	}
	if lim <= 0 || cost > lim {
		return t.Add(s.Window)
	}
	base := s.before()
	live := s.log[s.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].total-base >= free })
	return live[i].at.Add(s.Window)
}

// Admit implements Quota.
func (s *SlidingLog) Admit(t time.Time, cost int) (bool, time.Duration) {
	s.trim(t)
	if s.sum()+cost > s.Limit*s.Drift.pctAt(t)/100 {
		if s.Charged {
			s.add(t, cost)
		}
		return false, s.room(t, cost).Sub(t)
	}
	s.add(t, cost)
	return true, 0
}

// Next implements Quota.
func (s *SlidingLog) Next(t time.Time, cost int) time.Time {
	for range 1 << 20 {
		s.trim(t)
		n := s.room(t, cost)
		if !n.After(t) {
			return t
		}
		t = n
	}
	return t
}

// FixedWindow admits Limit units per window, the count reset at each
// boundary; the boundaries lie at Epoch-Phase+k×Window.
type FixedWindow struct {
	Limit   int
	Window  time.Duration
	Phase   time.Duration
	Drift   Drift
	Charged bool
	start   time.Time
	count   int
}

func (f *FixedWindow) roll(t time.Time) {
	if s := Epoch.Add((t.Sub(Epoch)+f.Phase)/f.Window*f.Window - f.Phase); s != f.start {
		f.start, f.count = s, 0
	}
}

// Admit implements Quota.
func (f *FixedWindow) Admit(t time.Time, cost int) (bool, time.Duration) {
	f.roll(t)
	if f.count+cost > f.Limit*f.Drift.pctAt(t)/100 {
		if f.Charged {
			f.count += cost
		}
		return false, f.start.Add(f.Window).Sub(t)
	}
	f.count += cost
	return true, 0
}

// Next implements Quota.
func (f *FixedWindow) Next(t time.Time, cost int) time.Time {
	for range 1 << 20 {
		f.roll(t)
		if f.count+cost <= f.Limit*f.Drift.pctAt(t)/100 {
			return t
		}
		t = f.start.Add(f.Window)
	}
	return t
}

// TokenBucket admits a call per unit of cost in the bucket; the bucket
// refills at PerSecond up to Burst, and starts full. With Charged a
// refused call still takes its cost, down to one burst in debt.
type TokenBucket struct {
	PerSecond float64
	Burst     float64
	Drift     Drift
	Charged   bool
	level     float64
	at        time.Time
	started   bool
}

func (b *TokenBucket) rate(t time.Time) float64 {
	return max(b.PerSecond*float64(b.Drift.pctAt(t))/100, 1e-3)
}

func (b *TokenBucket) fill(t time.Time) {
	if !b.started {
		b.level, b.at, b.started = b.Burst, t, true
	}
	if t.After(b.at) {
		b.level = min(b.Burst, b.level+t.Sub(b.at).Seconds()*b.rate(t))
		b.at = t
	}
}

func (b *TokenBucket) wait(t time.Time, cost int) time.Duration {
	return time.Duration(math.Ceil((float64(cost) - b.level) / b.rate(t) * float64(time.Second)))
}

// Admit implements Quota.
func (b *TokenBucket) Admit(t time.Time, cost int) (bool, time.Duration) {
	b.fill(t)
	if b.level < float64(cost) {
		if b.Charged {
			b.level = max(b.level-float64(cost), -b.Burst)
		}
		return false, b.wait(t, cost)
	}
	b.level -= float64(cost)
	return true, 0
}

// Next implements Quota.
func (b *TokenBucket) Next(t time.Time, cost int) time.Time {
	b.fill(t)
	if b.level >= float64(cost) {
		return t
	}
	return t.Add(b.wait(t, cost))
}

// Unlimited admits everything: a server cap on calls in progress is then
// the only bound.
type Unlimited struct{}

// Admit implements Quota.
func (Unlimited) Admit(time.Time, int) (bool, time.Duration) { return true, 0 }

// Next implements Quota.
func (Unlimited) Next(t time.Time, _ int) time.Time { return t }
