package limiter

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// sizedLaw returns a law paced at rate that has learned calls' sizes:
// sizeMinSuccesses successes of size 400 billed 100 tokens each (four
// runes a token), with the budgets rpm and tpm named; and the time it is
// at, the paced schedule due then.
func sizedLaw(t *testing.T, rate float64, rpm, tpm int64) (*law, time.Time) {
	t.Helper()
	w, at := pacedLaw(t, rate)
	for range sizeMinSuccesses {
		s := w.startSized(at, 0, 400)
		at = at.Add(rtt)
		w.onSuccess(at, s, 100, 1)
	}
	w.nameQuota(rpm, tpm)
	w.rate, w.tat, w.reqTat = rate, at, at
	return w, at
}

// While a token budget binds, a start moves the paced schedule on by its
// own estimated tokens (its size at the tokens per unit learned, over the
// mean call's); otherwise, or with its size unknown, by one interval.
func TestLaw_pacesStartsInTokens(t *testing.T) {
	const rate = 100.0 // one start per 10 ms at the mean call
	tpm := int64(rate * 100 * 60)
	tests := []struct {
		name     string
		rpm, tpm int64
		size     int64
		want     float64 // intervals the start moves the schedule on
	}{
		{"tokens bind: a mean call", 0, tpm, 400, 1},
		{"tokens bind: twice the mean", 0, tpm, 800, 2},
		{"tokens bind: a quarter of the mean", 0, tpm, 100, 0.25},
		{"tokens bind: size unknown", 0, tpm, 0, 1},
		{"tokens bind: a size far off, capped", 0, tpm, 400 * 50, maxWeight},
		{"requests bind (tighter than tokens): by one interval", 60 * 50, tpm, 800, 1},
		{"tokens bind, requests named looser", 60 * 500, tpm, 800, 2},
		{"no budget named: by one interval", 0, 0, 800, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := sizedLaw(t, rate, tt.rpm, tt.tpm)
			w.startSized(at, 0, tt.size)
			got := float64(w.tat.Sub(at)) / float64(10*time.Millisecond)
			if math.Abs(got-tt.want) > 1e-6 {
				t.Errorf("the start moved the schedule on by %.4f intervals, want %.4f", got, tt.want)
			}
		})
	}
}

// Paced in tokens, the call first in line waits until the schedule has
// room for its own tokens: a call of twice the mean tokens one interval
// later than a mean call, a quarter of the mean three quarters earlier.
// (Charged only once started, a long call would overrun the window by
// all its tokens.)
func TestLaw_headWaitsForRoomForItsTokens(t *testing.T) {
	const rate = 100.0
	iv := 10 * time.Millisecond
	tests := []struct {
		name     string
		tpm      int64
		nextSize int64
		want     time.Duration // hold, from the schedule's due time
	}{
		{"a mean call", rate * 100 * 60, 400, -paceBurst * iv},
		{"twice the mean", rate * 100 * 60, 800, iv - paceBurst*iv},
		{"a quarter of the mean", rate * 100 * 60, 100, -iv*3/4 - paceBurst*iv},
		{"size unknown: a mean call", rate * 100 * 60, 0, -paceBurst * iv},
		{"no token budget: a mean call whatever its size", 0, 800, -paceBurst * iv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := sizedLaw(t, rate, 0, tt.tpm)
			w.nextSize = tt.nextSize
			if got := w.hold(at).Sub(at); got != tt.want {
				t.Errorf("hold %v from the due time, want %v", got, tt.want)
			}
		})
	}
}

// Paced in tokens, short prompts come faster than the mean: a requests
// budget named too still holds them, at namedShare of it (plus the pacing
// tolerance), whichever binds.
func TestLaw_requestsBudgetHoldsShortCalls(t *testing.T) {
	tests := []struct {
		name      string
		rpm       int64
		size      int64
		wantStart float64 // starts in the second that follows
	}{
		{"short calls: the requests budget binds", 60 * 150, 100, 150*namedShare + paceBurst},
		{"mean calls: the tokens budget binds", 60 * 150, 400, 100 + paceBurst},
		// The pacing tolerance is paceBurst mean calls' tokens: eight
		// quarter calls.
		{"short calls, no requests budget named: tokens alone", 0, 100, 400 + 4*paceBurst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := sizedLaw(t, 100, tt.rpm, 100*100*60)
			end := at.Add(time.Second)
			n := 0
			for t := at; t.Before(end); {
				if w.mayStart(t, 0) {
					w.startSized(t, 0, tt.size)
					n++
					continue
				}
				t = w.hold(t)
			}
			if math.Abs(float64(n)-tt.wantStart) > 1.5 {
				t.Errorf("%d starts in a second, want about %.1f", n, tt.wantStart)
			}
		})
	}
}

// The tokens per unit of size come from what successes are billed: no
// estimate before sizeMinSuccesses of them, then the size at their ratio.
func TestLaw_learnsTokensPerSize(t *testing.T) {
	tests := []struct {
		name      string
		successes int
		size      int64
		want      float64
	}{
		{"too few successes: no estimate", sizeMinSuccesses - 1, 800, 0},
		{"enough: the size at the ratio billed", sizeMinSuccesses, 800, 200},
		{"size unknown: no estimate", sizeMinSuccesses, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{Start: 10})
			at := simEpoch
			for range tt.successes {
				s := w.startSized(at, 0, 400)
				at = at.Add(rtt)
				w.onSuccess(at, s, 100, 1)
			}
			if got := w.estimatedTokens(tt.size); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("estimated %.2f tokens, want %.2f", got, tt.want)
			}
		})
	}
}

// A named token budget leaves room for calls that bill more than the mean
// while starts are counted one call each; paced in tokens it leaves none
// for them: namedShare of the named rate is namedTokenShare of the
// budget over the mean call.
func TestLaw_namedTokensRoom(t *testing.T) {
	const tpm = 100 * 100 * 60 // 100 mean calls a second
	w, at := pacedLaw(t, 100)
	for i := range 64 {
		// Calls of 50 and 150 tokens by turns, sizes unknown.
		s := w.start(at, 0)
		at = at.Add(rtt)
		w.onSuccess(at, s, int64(50+100*(i%2)), 1)
	}
	w.nameQuota(0, tpm)
	if got := w.namedRate(); got >= 99 {
		t.Errorf("counted a call each, the named rate is %.2f; want room below 100 for the calls above the mean", got)
	}
	for i := range sizeMinSuccesses {
		s := w.startSized(at, 0, int64(200+400*(i%2)))
		at = at.Add(rtt)
		w.onSuccess(at, s, int64(50+100*(i%2)), 1)
	}
	w.startSized(at, 0, 400) // the first start paced in tokens sets the unit
	if got, want := w.namedRate()*namedShare, 100*namedTokenShare; math.Abs(got-want) > 1e-6 {
		t.Errorf("paced in tokens, the rate paced at the named budget is %.4f; want %.4f", got, want)
	}
}

// AcquireWeighted hands each call's size to the law, whether the call
// starts at once or waits in line for a slot: the successes' tokens then
// teach it the tokens per unit of size.
func TestAIMD_AcquireWeighted_sizesReachTheLaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 1, Ceiling: 1})
		first, err := l.AcquireWeighted(t.Context(), 400)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan acquired, 1)
		go func() {
			s, err := l.AcquireWeighted(t.Context(), 800)
			ch <- acquired{s, err}
		}()
		synctest.Wait()
		if _, ok := returned(ch); ok {
			t.Fatal("a second call started with a limit of 1")
		}
		clk.Advance(rtt)
		l.Succeeded(first, 100)
		synctest.Wait()
		second, ok := returned(ch)
		if !ok || second.err != nil {
			t.Fatalf("the waiting call: returned %v, err %v", ok, second.err)
		}
		clk.Advance(rtt)
		l.Succeeded(second.started, 200)
		l.mu.Lock()
		defer l.mu.Unlock()
		if got := l.law.sizes; got.n != 2 || got.tokens/got.size != 0.25 {
			t.Errorf("the law learned %d sizes at %.3f tokens each, want 2 at 0.25", got.n, got.tokens/got.size)
		}
	})
}

// Paced in tokens, the rate sent over the last round trip counts each
// call at its weight; while the schedule holds the starts back (it is not
// behind now) that is the paced rate, whatever the weights of the few
// calls a round trip holds.
func TestLaw_sentRateInTokens(t *testing.T) {
	const rate = 100.0
	tests := []struct {
		name string
		idle time.Duration // from the last start to the reading
		want float64
	}{
		// Three calls of a quarter of the mean in the last round trip,
		// 7.5 a second counted, but the schedule is due.
		{"the schedule holds the starts: the paced rate", 0, rate},
		// Half a round trip later the schedule is behind: nothing held
		// the starts back, and the three count at their weight.
		{"the schedule behind: what was sent, weighted", rtt / 2, 3 * 0.25 / rtt.Seconds()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := sizedLaw(t, rate, 0, rate*100*60)
			for range 3 {
				w.startSized(at, 0, 100)
			}
			got := w.sentRate(at.Add(tt.idle))
			if want := max(tt.want, w.minRate()); math.Abs(got-want) > 1e-6 {
				t.Errorf("sent rate %.3f, want %.3f", got, want)
			}
		})
	}
}
