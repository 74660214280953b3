package quotasim

import (
	"fmt"
	"testing"
	"time"
)

// ms is n milliseconds after Epoch.
func ms(n int) time.Time { return Epoch.Add(time.Duration(n) * time.Millisecond) }

// Each quota admits what it should, says truly how long a refused call
// must wait (a call at that instant is admitted, one a millisecond
// earlier is not), and Next agrees with Admit; a charged quota counts its
// refusals.
func TestQuota_admitAndWait(t *testing.T) {
	cases := []struct {
		name  string
		quota func() Quota
		calls []int // instants (ms) of calls, all admitted but the last
	}{
		{"sliding 3 per 1s", func() Quota { return &SlidingLog{Limit: 3, Window: time.Second} }, []int{0, 100, 200, 300}},
		{"fixed 3 per 1s phase 400ms", func() Quota { return &FixedWindow{Limit: 3, Window: time.Second, Phase: 400 * time.Millisecond} }, []int{0, 100, 200, 300}},
		{"bucket 10/s burst 2", func() Quota { return &TokenBucket{PerSecond: 10, Burst: 2} }, []int{0, 0, 50}},
		{"tokens 250 per 1s, 100 a call", func() Quota { return &SlidingLog{Limit: 250, Window: time.Second} }, []int{0, 10, 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := c.quota()
			cost := 1
			if c.name[:6] == "tokens" {
				cost = 100
			}
			for i, at := range c.calls {
				ok, wait := q.Admit(ms(at), cost)
				if last := i == len(c.calls)-1; ok == last {
					t.Fatalf("call %d at %dms: admitted %v", i, at, ok)
				}
				if !ok {
					// time only moves on: a quota forgets what it no longer counts
					reopen := ms(at).Add(wait)
					if ok, _ := q.Admit(reopen.Add(-time.Millisecond), cost); ok {
						t.Errorf("admitted a millisecond before the wait said")
					}
					if n := q.Next(reopen.Add(-time.Millisecond), cost); n.Sub(reopen).Abs() > time.Microsecond {
						t.Errorf("Next %v, the 429's wait says %v", n.Sub(Epoch), reopen.Sub(Epoch))
					}
					if ok, _ := q.Admit(reopen, cost); !ok {
						t.Errorf("refused at %v, when the wait said", reopen.Sub(Epoch))
					}
				}
			}
		})
	}
	t.Run("charged sliding", func(t *testing.T) {
		q := &SlidingLog{Limit: 1, Window: time.Second, Charged: true}
		q.Admit(ms(0), 1)
		q.Admit(ms(500), 1) // refused, and counted until 1.5 s
		if ok, _ := q.Admit(ms(1000), 1); ok {
			t.Error("a charged refusal did not count")
		}
		// refused at 1 s and charged again: knocking keeps the door shut
		if ok, _ := q.Admit(ms(1999), 1); ok {
			t.Error("admitted while the last charged refusal is in the window")
		}
		if ok, _ := q.Admit(ms(3000), 1); !ok {
			t.Error("refused once every charged refusal left the window")
		}
	})
}

// The perfect client is never refused (Perfect panics if it is) and no
// faster than the quota allows: a sliding log of B per W drains n items in
// at least (n/B - 1) windows; with a cap it keeps at most Cap in flight.
// A sliding log paced well under its limit admits every call, however
// long it runs: its log is compacted now and then, and the window's sum
// must not count what was compacted away. (It did: the first running
// total kept was read as the window's sum until the next entry expired,
// and a law paced at a tenth of the quota met a 429 every thousand calls.)
func TestSlidingLog_compactedKeepsCounting(t *testing.T) {
	q := &SlidingLog{Limit: 100, Window: time.Second}
	for i := range 20000 {
		at := ms(i * 100) // 10 a second, a tenth of the limit
		if ok, wait := q.Admit(at, 1); !ok {
			t.Fatalf("call %d at %v refused (wait %v) with 10 in the window", i, at.Sub(Epoch), wait)
		}
		if n := q.Next(at, 1); !n.Equal(at) {
			t.Fatalf("call %d: Next %v, want %v", i, n.Sub(Epoch), at.Sub(Epoch))
		}
	}
}

func TestPerfect_boundedByTheQuota(t *testing.T) {
	sh := Shape{
		Name: "sliding 50 per 1s", Seed: 1, Items: 500, Refusal: 20 * time.Millisecond,
		Requests: func() Quota { return &SlidingLog{Limit: 50, Window: time.Second} },
		Latency:  Uniform(100*time.Millisecond, 200*time.Millisecond),
	}
	if d := Perfect(sh); d < 9*time.Second || d > 9*time.Second+200*time.Millisecond {
		t.Errorf("perfect %v, want 9 s and one latency", d)
	}
	sh.Requests, sh.Cap = nil, 10
	sh.Latency = Uniform(time.Second, time.Second)
	if d := Perfect(sh); d != 50*time.Second {
		t.Errorf("perfect with a cap of 10 and 1 s calls: %v, want 50 s", d)
	}
}

// fixedRate is a law that starts a call every interval, whatever happens.
type fixedRate struct {
	every time.Duration
	next  time.Time
}

func (f *fixedRate) Ready(t time.Time, _ int, _ int64) (bool, time.Time) {
	if t.Before(f.next) {
		return false, f.next
	}
	return true, time.Time{}
}
func (f *fixedRate) Start(t time.Time, _ int, _ int64) time.Time {
	f.next = t.Add(f.every)
	return t
}
func (f *fixedRate) Succeeded(time.Time, time.Time, int64, int)                         {}
func (f *fixedRate) RateLimited(time.Time, time.Time, time.Duration, int64, int64, int) {}
func (f *fixedRate) MostInFlight() int                                                  { return 1000 }

// Run drives a law: one pacing exactly at the quota's rate is never
// refused and takes the perfect client's time less its head start; one
// pacing at twice the rate is refused about half the time and retries
// every refused item until all are done.
func TestRun_paced(t *testing.T) {
	sh := Shape{
		Name: "sliding 10 per 1s", Seed: 2, Items: 200, Refusal: 10 * time.Millisecond,
		Requests: func() Quota { return &SlidingLog{Limit: 10, Window: time.Second} },
		Latency:  Uniform(50*time.Millisecond, 50*time.Millisecond),
	}
	r := Run(sh, &fixedRate{every: 100 * time.Millisecond})
	if r.R429s != 0 || r.Done != 200 || r.Calls != 200 {
		t.Errorf("at the rate: %d calls, %d refused, %d done", r.Calls, r.R429s, r.Done)
	}
	if g := r.Goodput(); g < 0.9 || g > 1 {
		t.Errorf("at the rate: goodput %.3f, want 0.9-1 (the perfect client's head start is one window of 20)", g)
	}
	r = Run(sh, &fixedRate{every: 50 * time.Millisecond})
	if r.Done != 200 || r.Share() < 0.4 || r.Share() > 0.6 {
		t.Errorf("at twice the rate: %d done, %.2f refused", r.Done, r.Share())
	}
}

// Draw is deterministic, shape i of seed S is FromSeed(S+i), every
// family comes up, and each run is long enough to learn in: at least
// four windows' budget or 20,000 items.
func TestDraw(t *testing.T) {
	a, b := Draw(300, 77), Draw(300, 77)
	seen := map[string]bool{}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Name != FromSeed(77+uint64(i)).Name {
			t.Fatalf("shape %d differs between draws", i)
		}
		if a[i].Items < 1000 || a[i].Items > maxItems {
			t.Errorf("%s: %d items, want 1,000-20,000", a[i].Name, a[i].Items)
		}
		seen[a[i].Family] = true
	}
	if len(seen) != len(Families) {
		t.Errorf("families drawn: %v, want all of %v", seen, Families)
	}
	if got := fmt.Sprint(items(1000, 2000, 10)); got != "8000" {
		t.Errorf("items for a window of 2,000: %s, want 8000", got)
	}
}
