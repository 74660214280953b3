package bench

import (
	"math"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// segment is a span of a simulator's schedule with one request rate.
type segment struct {
	from, to time.Duration // to is math.MaxInt64 for the last segment
	perSec   float64       // requests admitted per second
}

// segments cuts cfg's schedule into spans of constant request rate, in
// order. cfg.Schedule must be sorted (as geminisim.ParseSchedule returns
// it); the rate is the simulator's: RPM×percent/100 rounded down, per
// Window.
func segments(cfg geminisim.Config) []segment {
	window := cfg.Window
	if window <= 0 {
		window = geminisim.DefaultWindow
	}
	rate := func(pct int) float64 {
		return float64(int64(cfg.RPM)*int64(pct)/100) / window.Seconds()
	}
	var out []segment
	from, pct := time.Duration(0), 100
	for _, st := range cfg.Schedule {
		if st.At > from {
			out = append(out, segment{from, st.At, rate(pct)})
			from = st.At
		}
		pct = st.Percent
	}
	return append(out, segment{from, math.MaxInt64, rate(pct)})
}

// Capacity is how many requests cfg's request quota (RPM per Window,
// following its Schedule) admits between from and to after the simulator
// started: the integral of the quota's rate over that span. No client can
// get more admitted, give or take the one window's burst a sliding window
// allows at the very start. It is 0 when cfg has no request quota.
func Capacity(cfg geminisim.Config, from, to time.Duration) float64 {
	if cfg.RPM <= 0 || to <= from {
		return 0
	}
	total := 0.0
	for _, s := range segments(cfg) {
		lo, hi := max(s.from, from), min(s.to, to)
		if hi > lo {
			total += s.perSec * (hi - lo).Seconds()
		}
	}
	return total
}

// Minimum is the shortest time from the simulator's start in which cfg's
// request quota admits n requests: the physical limit of any client for n
// calls. ok is false when the quota never admits n (no request quota, or a
// schedule that ends at 0%).
func Minimum(cfg geminisim.Config, n int64) (d time.Duration, ok bool) {
	if cfg.RPM <= 0 || n <= 0 {
		return 0, n <= 0
	}
	need := float64(n)
	for _, s := range segments(cfg) {
		if s.perSec <= 0 {
			continue
		}
		span := float64(s.to-s.from) / float64(time.Second)
		if s.to == math.MaxInt64 || need <= s.perSec*span {
			return s.from + time.Duration(need/s.perSec*float64(time.Second)), true
		}
		need -= s.perSec * span
	}
	return 0, false
}

// HalfForAThird is the default live-quota schedule for n calls at rpm
// requests per window: the quota drops to 50% for the middle third of the
// time an ideal client needs for them, then comes back. That time T solves
// n = rate×2T/3 + rate/2×T/3, i.e. T = 6n/(5×rate); the steps are rounded
// to 100 ms. It returns nil when rpm or n is not positive.
func HalfForAThird(n, rpm int, window time.Duration) []geminisim.Step {
	if n <= 0 || rpm <= 0 {
		return nil
	}
	if window <= 0 {
		window = geminisim.DefaultWindow
	}
	perSec := float64(rpm) / window.Seconds()
	t := time.Duration(6 * float64(n) / (5 * perSec) * float64(time.Second))
	third := (t / 3).Round(100 * time.Millisecond)
	if third <= 0 {
		third = 100 * time.Millisecond
	}
	return []geminisim.Step{{At: third, Percent: 50}, {At: 2 * third, Percent: 100}}
}
