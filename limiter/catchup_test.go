package limiter

import (
	"testing"
	"time"
)

// burstThenRefused runs slow start's burst through a law built for cfg:
// burst calls 4 ms apart from simEpoch, each admitted after rtt, then a
// 429 of a call started at 800 ms naming rpm and tpm per minute, with the
// retry delay retryAfter. It returns the law and the refused call's start.
func burstThenRefused(cfg Config, burst int, rpm, tpm int64, retryAfter time.Duration) (*law, time.Time) {
	w := newTestLaw(cfg)
	var starts []time.Time
	for i := range burst {
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

// readAfterSlowStart is burstThenRefused for a law in slow start whose
// 200-call burst spent a sliding log of 200 a second over 1 s, with the
// budget named.
func readAfterSlowStart() (*law, time.Time) {
	return burstThenRefused(Config{}, 200, 200*60, 0, 200*time.Millisecond)
}

// Slow start's 429 reads a sliding log's window when the calls admitted
// since the first start are the budget that window holds at the named
// rate, and no other shape's.
func TestLaw_readWindow(t *testing.T) {
	const perMin = 200 * 60 // 200 a second named; the burst is 200 calls
	margin := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (1 + windowMargin)) }
	slow := Config{}
	learned := Config{Start: 64, StartRate: 250} // a rate learned by an earlier run: no slow start
	tests := []struct {
		name       string
		cfg        Config
		burst      int
		rpm, tpm   int64
		retryAfter time.Duration
		want       time.Duration
	}{
		{"a sliding log: count and length agree", slow, 200, perMin, 0, 200 * time.Millisecond, margin(time.Second)},
		{"the first call reached the server late: the length read long, the count bounds it",
			slow, 200, perMin, 0, 215 * time.Millisecond, margin(time.Second + 2*time.Second/200)},
		{"the first call reached the server 60 ms late: the count gives the window",
			slow, 200, perMin, 0, 260 * time.Millisecond, margin(time.Second + 2*time.Second/200)},
		{"the length far longer than the count's: others' calls in the window, a shared quota",
			slow, 200, perMin, 0, 400 * time.Millisecond, 0},
		{"a refused call slowed: the length read short, the count's is taken", slow, 200, perMin, 0, 190 * time.Millisecond, margin(time.Second)},
		{"a fixed window opening at its boundary, the first call late in it", slow, 200, perMin, 0, 100 * time.Millisecond, 0},
		{"a token bucket frees a call's worth at once", slow, 200, perMin, 0, 5 * time.Millisecond, 0},
		{"a log spent over more than a window", slow, 200, 100 * 60, 0, 200 * time.Millisecond, 0},
		{"a delay too short to tell the window by", slow, 166, perMin, 0, 30 * time.Millisecond, 0},
		{"a delay rounded to whole seconds", slow, 200, perMin, 0, time.Second, 0},
		{"no budget named", slow, 200, 0, 0, 200 * time.Millisecond, 0},
		{"a budget in tokens named", slow, 200, perMin, 1_000_000, 200 * time.Millisecond, 0},
		{"not slow start: a rate learned by an earlier run", learned, 200, perMin, 0, 200 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := burstThenRefused(tt.cfg, tt.burst, tt.rpm, tt.tpm, tt.retryAfter)
			if w.knownWindow != tt.want {
				t.Errorf("window read %v, want %v", w.knownWindow, tt.want)
			}
		})
	}
}

// After an overload hold (or idle time), with the window known, the law
// starts the calls kept back at once (no faster than catchUpSpeed times
// the rate), while its starts over the quota's window stay within its
// budget; with no window known it only paces on.
func TestLaw_sendsByWindow(t *testing.T) {
	tests := []struct {
		name        string
		known, held bool
		wantBurst   bool
	}{
		{"window known, a hold", true, true, true},
		{"no window known, a hold", false, true, false},
		{"window known, calls idle with no hold", true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, refusedAt := readAfterSlowStart()
			if tt.known != (w.knownWindow > 0) {
				w.knownWindow = 0
				w.fitLimit()
			}
			rate := w.rate
			if rate != 200*namedShare {
				t.Fatalf("rate %.1f after the named 429, want %.1f", rate, 200*namedShare)
			}
			at, _ := drive(w, refusedAt.Add(200*time.Millisecond), time.Second) // paced to 2 s
			if tt.held {
				w.onHeld(at)
			}
			open := at.Add(200 * time.Millisecond)
			if tt.held {
				w.onOpened(open)
			}
			from := w.nSent
			drive(w, open, 1500*time.Millisecond)
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
			case tt.wantBurst && soon < paced+25:
				t.Errorf("%d calls started in the 300 ms after the hold, want the hold's ~39 on top of the pace's %d", soon, paced)
			case !tt.wantBurst && soon > paced:
				t.Errorf("%d calls started in the 300 ms after the pause, want the pace's %d at most", soon, paced)
			}
			fastest := time.Duration(float64(time.Second)/rate/catchUpSpeed) - time.Nanosecond
			for i := 1; i < len(after) && tt.known; i++ {
				if gap := after[i].Sub(after[i-1]); gap < fastest {
					t.Fatalf("starts %v apart at %v, faster than %d times the rate", gap, after[i].Sub(simEpoch), catchUpSpeed)
				}
			}
			// The quota (200 over any 1 s) admits every start after slow
			// start's burst while the law sends by its window. (With none
			// known, the pace after the burst meets its last calls.)
			if !tt.known {
				return
			}
			var all []time.Time
			for i := max(0, w.nSent-sentRing); i < w.nSent; i++ {
				if c := w.sent[i%sentRing]; c.outcome != refusedCall {
					all = append(all, c.at)
				}
			}
			for i, j := 0, 0; j < len(all); j++ {
				for !all[i].Add(time.Second).After(all[j]) {
					i++
				}
				if n := j - i + 1; n > 200 && all[j].After(refusedAt) {
					t.Fatalf("%d starts in the second up to %v, want at most the quota's 200", n, all[j].Sub(simEpoch))
				}
			}
		})
	}
}

// A 429 with the window known says the quota does not count as the law
// does, and the window is forgotten (the pace is even again), unless it
// is the answer to a look above the budget the window was read with.
func TestLaw_windowRefused(t *testing.T) {
	for _, tt := range []struct {
		name      string
		looking   bool
		rpm, tpm  int64 // named by the 429
		wantKnown bool
	}{
		{"refused at the named pace", false, 200 * 60, 0, false},
		{"refused looking above the named budget", true, 200 * 60, 0, true},
		{"refused looking, a budget in tokens named now", true, 200 * 60, 100_000, false},
		{"refused looking, a lower budget named", true, 150 * 60, 0, false},
		{"a higher budget named: the quota grew", false, 250 * 60, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, refusedAt := readAfterSlowStart()
			at, _ := drive(w, refusedAt.Add(200*time.Millisecond), time.Second)
			w.onHeld(at)
			w.onOpened(at.Add(200 * time.Millisecond))
			at, _ = drive(w, at.Add(200*time.Millisecond), time.Second)
			if w.knownWindow <= 0 {
				t.Fatal("no window known after a hold")
			}
			if tt.looking {
				w.rate = 200 * 1.1
			}
			s := w.start(at, 20)
			byWindow := w.limit
			w.nameQuota(tt.rpm, tt.tpm)
			w.onRateLimited(at.Add(rtt), s, 50*time.Millisecond, 20)
			if got := w.knownWindow > 0; got != tt.wantKnown {
				t.Errorf("window known %v (%v), want %v", got, w.knownWindow, tt.wantKnown)
			}
			if !tt.wantKnown && w.limit*2 > byWindow {
				t.Errorf("limit on calls in flight %d after the window was forgotten, want the even pace's, about a third of the %d sent by it", w.limit, byWindow)
			}
		})
	}
}

// The first probe the quota admits after slow start's 429 with a rounded
// delay reads a sliding log's window when the window the count gives at
// the named rate lies between the last refused probe and this one (each
// since the first start), and no other.
func TestLaw_readWindowReopened(t *testing.T) {
	const perMin = 200 * 60 // 200 a second named; the burst is 400 calls
	margin := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (1 + windowMargin)) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name              string
		refused, admitted time.Duration // the last refused probe's start and the admitted one's; refused 0: none
		tpm               int64
		cfg               Config
		want              time.Duration
	}{
		{"a sliding log of 400 over 2 s", ms(1600), ms(2100), 0, Config{}, margin(time.Second*2 + 2*time.Second/200)},
		{"the admitted probe just after the window", ms(1990), ms(2004), 0, Config{}, margin(ms(2004))},
		{"the count's window before the last refused probe: the quota shared or fallen", ms(2200), ms(2500), 0, Config{}, 0},
		{"the count's window after the admitted probe: a fixed window's boundary", ms(900), ms(1200), 0, Config{}, 0},
		{"no probe refused: a token bucket", 0, ms(900), 0, Config{}, 0},
		{"a budget in tokens named", ms(1600), ms(2100), 1_000_000, Config{}, 0},
		{"not slow start: a limit given", ms(1600), ms(2100), 0, Config{Start: 64}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(tt.cfg)
			var starts []time.Time
			for i := range 400 {
				starts = append(starts, w.start(simEpoch.Add(time.Duration(i)*2*time.Millisecond), i%64))
			}
			for _, s := range starts {
				w.onSuccess(s.Add(rtt), s, 100, 64)
			}
			s := w.start(simEpoch.Add(ms(800)), 20)
			w.nameQuota(perMin, tt.tpm)
			w.onRateLimited(simEpoch.Add(ms(801)), s, 3*time.Second, 20)
			if w.knownWindow != 0 {
				t.Fatalf("a rounded delay read the window as %v", w.knownWindow)
			}
			w.gate, w.needProbe, w.probe, w.backoffs = time.Time{}, true, time.Time{}, 1
			if tt.refused > 0 {
				w.backoffs, w.refusedProbe = 2, simEpoch.Add(tt.refused)
			}
			probe := w.start(simEpoch.Add(tt.admitted), 0)
			w.onSuccess(probe.Add(rtt), probe, 100, 1)
			if w.knownWindow != tt.want {
				t.Errorf("window read %v, want %v", w.knownWindow, tt.want)
			}
		})
	}
}
