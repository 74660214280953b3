package limiter

import (
	"testing"
	"time"
)

// A named budget is evidence like any other: a 429 naming a per-minute
// budget that what the quota admitted contradicts (more over some span
// than any budget of that size can admit) does not set the pace; the law
// paces at what the quota proved and climbs from there, and later 429s
// naming it again are read as naming nothing. A name the admitted calls
// agree with is believed, including a fixed minute's two windows spent
// back to back (twice the budget within seconds), and a live quota's
// fall named below what it admitted before.
func TestLaw_namedBudgetContradicted(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64       // paced (and admitted) before the 429
		over     time.Duration // for this long
		first    bool          // the 429 is the run's first event
		before   int64         // a budget of requests named at an earlier 429, 0 if none
		rpm, tpm int64         // named by the 429
		believed bool
	}{
		// 1,000 calls in 10 s where 100 a minute admits 200 at most.
		{name: "a sliding 100 per second named 100 a minute", rate: 100, over: 10 * time.Second, rpm: 100},
		// Slow start's 429: 300 calls admitted in 3 s already
		// contradict 100 a minute; the law never crawls at it.
		{name: "the first 429 names 100 a minute after 300 admitted", rate: 100, over: 3 * time.Second, first: true, rpm: 100},
		// 200 calls a second of 100 tokens for 20 s: 400,000 tokens
		// where 120,000 a minute admits 240,000 over a span under two.
		{name: "tokens: 120,000 a minute named, 20,000 a second billed", rate: 200, over: 20 * time.Second, tpm: 120000},
		{name: "a truthful named minute", rate: 100.0 / 60, over: 50 * time.Second, rpm: 100, believed: true},
		// 200 calls in 2 s: a fixed minute's last 100 and the next
		// one's first 100. A bound of one budget per minute (plus
		// one) would read this as a contradiction.
		{name: "a fixed minute's two windows back to back", rate: 100, over: 2 * time.Second, rpm: 100, believed: true},
		// 2,000 calls in 10 s under 12,000 a minute named before;
		// the quota fell and names 600: weighed against the highest
		// name, not the new one.
		{name: "a live quota falls and names its new budget", rate: 200, over: 10 * time.Second, before: 12000, rpm: 600, believed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, tt.rate)
			refuse := func(rpm, tpm int64) {
				s := w.start(at, 0)
				at = at.Add(20 * time.Millisecond)
				w.nameQuota(rpm, tt.tpm)
				w.onRateLimited(at, s, 7300*time.Microsecond, 1)
			}
			if tt.before > 0 {
				w.eventRate = tt.rate
				refuse(tt.before, 0)
				w.rate = tt.rate // the quota admitted it
			}
			if !tt.first {
				w.eventRate = tt.rate
			}
			at = feed(w, at, tt.rate, tt.over)
			w.rate = tt.rate
			admitted := w.admittedFrom(at.Add(-tt.over), at) / tt.over.Seconds()
			refuse(tt.rpm, tt.tpm)
			named := w.namedRate()
			switch {
			case tt.believed && (w.namedRPM != tt.rpm || w.namedTPM != tt.tpm || named <= 0 || w.rate > named*namedShare*(1+1e-9)):
				t.Fatalf("rate %.2f, names %d/%d after the 429; want the names believed and the rate at most %.2f", w.rate, w.namedRPM, w.namedTPM, named*namedShare)
			case tt.believed:
				return
			case w.namedRPM != 0 || w.namedTPM != 0 || w.lastRPM != 0 || w.lastTPM != 0:
				t.Fatalf("names %d/%d (last %d/%d) kept; the quota admitted %.1f a second", w.namedRPM, w.namedTPM, w.lastRPM, w.lastTPM, admitted)
			case w.rate < admitted*0.8 || w.rate > admitted: // the round trip before the 429 sent nothing
				t.Fatalf("rate %.2f after the 429; want what the quota admitted (%.1f a second) less the margin", w.rate, admitted)
			case !w.bounded || w.safe != w.rate:
				t.Fatalf("safe %.2f, bounded %v; want the rate proven and the climb bounded, not probing", w.safe, w.bounded)
			}
			// Named again at the next event: still contradicted.
			at, _ = drive(w, at, w.answerLag())
			rate := w.rate
			refuse(tt.rpm, tt.tpm)
			if w.namedRPM != 0 || w.namedTPM != 0 || w.rate < rate*0.5 {
				t.Errorf("named again, names %d/%d and rate %.2f (%.2f before); want the name still disbelieved", w.namedRPM, w.namedTPM, w.rate, rate)
			}
		})
	}
}

// feed starts calls at rate a second for over from at, each admitted a
// round trip later, whatever the law would pace: the quota admitted them.
// It returns the time the last one answered.
func feed(w *law, at time.Time, rate float64, over time.Duration) time.Time {
	gap := time.Duration(float64(time.Second) / rate)
	var flying []time.Time
	end := at.Add(over)
	for next := at; next.Before(end) || len(flying) > 0; {
		if next.Before(end) && (len(flying) == 0 || !flying[0].Add(rtt).Before(next)) {
			flying = append(flying, w.start(next, len(flying)))
			next = next.Add(gap)
			continue
		}
		w.onSuccess(flying[0].Add(rtt), flying[0], 100, len(flying))
		at = flying[0].Add(rtt)
		flying = flying[1:]
		if !next.Before(end) {
			next = end
		}
	}
	return at
}
