package limiter

import (
	"testing"
	"time"
)

// readAfterSlowStart runs slow start's burst through a fresh law: 200
// calls 4 ms apart from simEpoch, each admitted after rtt, then a 429 of
// a call started at 800 ms naming rpm and tpm per minute, with the retry
// delay retryAfter. It returns the law and the refusal's time.
func readAfterSlowStart(rpm, tpm int64, retryAfter time.Duration) (*law, time.Time) {
	w := newTestLaw(Config{})
	var starts []time.Time
	for i := range 200 {
		starts = append(starts, w.start(simEpoch.Add(time.Duration(i)*4*time.Millisecond), i%64))
	}
	for _, s := range starts {
		w.onSuccess(s.Add(rtt), s, 100, 64)
	}
	refusedAt := simEpoch.Add(800 * time.Millisecond)
	s := w.start(refusedAt, 20)
	w.nameQuota(rpm, tpm)
	w.onRateLimited(refusedAt.Add(time.Millisecond), s, retryAfter, 20)
	return w, refusedAt
}

// Slow start's 429 reads a sliding log's window when the calls admitted
// since the first start are the budget that window holds at the named
// rate, and no other shape's.
func TestLaw_readWindow(t *testing.T) {
	const perMin = 200 * 60 // 200 a second named; the burst is 200 calls
	margin := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (1 + windowMargin)) }
	tests := []struct {
		name       string
		rpm, tpm   int64
		retryAfter time.Duration
		want       time.Duration
	}{
		{"a sliding log: count and length agree", perMin, 0, 200 * time.Millisecond, margin(time.Second)},
		{"the first call reached the server late: the length read long, the count bounds it",
			perMin, 0, 215 * time.Millisecond, margin(time.Second + 2*time.Second/200)},
		{"a refused call slowed: the length read short, the count's is taken", perMin, 0, 190 * time.Millisecond, margin(time.Second)},
		{"a fixed window opening at its boundary, the first call late in it", perMin, 0, 100 * time.Millisecond, 0},
		{"a token bucket frees a call's worth at once", perMin, 0, 5 * time.Millisecond, 0},
		{"a log spent over more than a window", 100 * 60, 0, 200 * time.Millisecond, 0},
		{"a delay rounded to whole seconds", perMin, 0, time.Second, 0},
		{"no budget named", 0, 0, 200 * time.Millisecond, 0},
		{"a budget in tokens named", perMin, 1_000_000, 200 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := readAfterSlowStart(tt.rpm, tt.tpm, tt.retryAfter)
			if w.knownWindow != tt.want {
				t.Errorf("window read %v, want %v", w.knownWindow, tt.want)
			}
		})
	}
}

// After an overload hold, with the window known, the law starts the calls
// the hold kept back at once (no faster than catchUpSpeed times the
// rate), while its starts over any window stay within what the paced
// rate fills it with; with no window known it only paces on.
func TestLaw_catchUpAfterHold(t *testing.T) {
	for _, known := range []bool{true, false} {
		name := map[bool]string{true: "window known", false: "no window"}[known]
		t.Run(name, func(t *testing.T) {
			w, refusedAt := readAfterSlowStart(200*60, 0, 200*time.Millisecond)
			if !known {
				w.knownWindow = 0
			}
			win, rate := w.knownWindow, w.rate
			if rate != 200*namedShare {
				t.Fatalf("rate %.1f after the named 429, want %.1f", rate, 200*namedShare)
			}
			at, _ := drive(w, refusedAt.Add(200*time.Millisecond), time.Second) // paced to 2 s
			w.onHeld(at)
			open := at.Add(200 * time.Millisecond)
			w.onOpened(open)
			from := w.nSent
			end, _ := drive(w, open, 1500*time.Millisecond)
			var after []time.Time
			for i := from; i < w.nSent; i++ {
				after = append(after, w.sent[i%sentRing].at)
			}
			// The window (the quota's, 1 s) held 0.8 s of the pace when
			// the hold opened: room for the 0.2 s it held, ~39 calls,
			// which the limit on calls in flight (~2 round trips' worth)
			// lets through within a few round trips.
			soon := 0
			for _, s := range after {
				if s.Before(open.Add(300 * time.Millisecond)) {
					soon++
				}
			}
			paced := int(rate*0.3) + paceBurst + 1
			switch {
			case known && soon < paced+25:
				t.Errorf("%d calls started in the 300 ms after the hold, want the hold's ~39 on top of the pace's %d", soon, paced)
			case !known && soon > paced:
				t.Errorf("%d calls started in the 300 ms after the hold with no window known, want the pace's %d at most", soon, paced)
			}
			if known {
				fastest := time.Duration(float64(time.Second)/rate/catchUpSpeed) - time.Nanosecond
				for i := 1; i < len(after); i++ {
					if gap := after[i].Sub(after[i-1]); gap < fastest {
						t.Fatalf("starts %v apart at %v, faster than %d times the rate", gap, after[i].Sub(simEpoch), catchUpSpeed)
					}
				}
			}
			// No window of the quota's length holds more starts than the
			// paced rate fills it with (the law's margin left out).
			limit := int(rate * win.Seconds())
			var all []time.Time
			for i := max(0, w.nSent-sentRing); i < w.nSent; i++ {
				if c := w.sent[i%sentRing]; c.outcome != refusedCall {
					all = append(all, c.at)
				}
			}
			if known {
				for i, j := 0, 0; j < len(all); j++ {
					for !all[i].Add(win).After(all[j]) {
						i++
					}
					if n := j - i + 1; n > limit && all[j].After(refusedAt) {
						t.Fatalf("%d starts in the window up to %v, want at most %d", n, all[j].Sub(simEpoch), limit)
					}
				}
			}
			if end.Before(open.Add(1500 * time.Millisecond)) {
				t.Fatalf("drive stopped at %v", end.Sub(simEpoch))
			}
		})
	}
}

// A 429 at the named pace with the window known says the quota does not
// count as the law does: the window is forgotten and the pace is even
// again. A 429 of a look above the named budget is the look's answer.
func TestLaw_windowRefused(t *testing.T) {
	for _, tt := range []struct {
		name       string
		looking    bool
		wantKnown  bool
		wantCaught bool
	}{
		{"refused at the named pace", false, false, false},
		{"refused looking above the named budget", true, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, refusedAt := readAfterSlowStart(200*60, 0, 200*time.Millisecond)
			at, _ := drive(w, refusedAt.Add(200*time.Millisecond), time.Second)
			w.onHeld(at)
			w.onOpened(at.Add(200 * time.Millisecond))
			at, _ = drive(w, at.Add(200*time.Millisecond), time.Second)
			if tt.looking {
				w.rate = 200 * 1.1
			}
			s := w.start(at, 20)
			w.nameQuota(200*60, 0)
			w.onRateLimited(at.Add(rtt), s, 50*time.Millisecond, 20)
			if got := w.knownWindow > 0; got != tt.wantKnown {
				t.Errorf("window known %v (%v), want %v", got, w.knownWindow, tt.wantKnown)
			}
			if w.catchUp != tt.wantCaught {
				t.Errorf("catching up %v, want %v", w.catchUp, tt.wantCaught)
			}
		})
	}
}
