package limiter

import (
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

// TestLaw_mechanisms drives the default law through quota shapes that
// each once sent it into a crawl or a spiral, in virtual time, and holds
// it to a floor of goodput against the perfect client and a ceiling of
// 429s. Each case names the mechanism it guards.
func TestLaw_mechanisms(t *testing.T) {
	for i, tc := range []struct {
		name    string
		shape   quotasim.Shape
		floor   float64 // goodput at least
		most429 float64 // share of calls refused at most
		// seeds: when more than one, the shape runs from Seed on that
		// many times and the bars hold the mean, where one seed's luck
		// sits several points either side of it.
		seeds int
	}{
		{
			// Slow start spends a per-minute window half a minute
			// in; its 429 says, exactly, that the window opens half a
			// minute later. What the window admitted over that half
			// minute, while the retry delay held every call back, is
			// not its rate: read so, the law fell from 80 calls a
			// second to 0.7 and crawled for hours.
			name: "per-minute window, named, exact delay held the calls",
			shape: quotasim.Shape{
				Family: "minute", Seed: 1, Items: 19968,
				Requests: func() quotasim.Quota { return &quotasim.SlidingLog{Limit: 4992, Window: time.Minute} },
				Latency:  quotasim.Uniform(time.Second, 3*time.Second),
				Retry:    quotasim.Exact, Refusal: 37 * time.Millisecond, NamedRPM: 4992,
			},
			floor: 0.6, most429: 0.02,
		},
		{
			// A token bucket of a one-call burst refuses the second of
			// two calls started together, which took the law down to a
			// call a second on a quota of seventy. Pacing let two or
			// three go at once after any pause, so it met such 429s
			// event after event. And with calls of over a second, the
			// calls sent within one round trip swing between one and
			// two: read over it, the sent rate was below the paced
			// rate half the time, and the rate never grew.
			name: "token bucket of a one-call burst, 1-1.6 s calls, bare 429s",
			shape: quotasim.Shape{
				Family: "bucket", Seed: 2, Items: 8000,
				Requests: func() quotasim.Quota { return &quotasim.TokenBucket{PerSecond: 70, Burst: 1} },
				Latency:  quotasim.Uniform(time.Second, 1600*time.Millisecond),
				Retry:    quotasim.Absent, Refusal: 17 * time.Millisecond,
			},
			floor: 0.5, most429: 0.01,
		},
		{
			// A budget of a call and a half a second, named, with
			// calls of a fifth of a second: the law held its rate to
			// a call per round trip, five a second, and lived on
			// 429s, each charged against the window.
			name: "per-minute window of 86, named, charged, 150-300 ms calls, bare 429s",
			shape: quotasim.Shape{
				Family: "minute", Seed: 3, Items: 3000,
				Requests: func() quotasim.Quota {
					return &quotasim.SlidingLog{Limit: 86, Window: time.Minute, Charged: true}
				},
				Latency: quotasim.Uniform(150*time.Millisecond, 300*time.Millisecond),
				Retry:   quotasim.Absent, Refusal: 23 * time.Millisecond, NamedRPM: 86,
			},
			// One seed's share of 429s ranges over 7-12%: seed 3
			// alone was held to 7% and passed by luck.
			floor: 0.85, most429: 0.10, seeds: 8,
		},
		{
			// A quota of 600 calls a second with calls of 2-3 s needs
			// 1,500 in flight, and it never refuses a client that keeps
			// fewer: held to a ceiling of 512 calls in flight, the law
			// sent a third of what the quota admits, with no 429 to
			// tell it why. (Slow start's round trips bound it below
			// the perfect client, which sends 1,500 at once.)
			name: "token bucket of 600 a second, 2-3 s calls: 1,500 in flight",
			shape: quotasim.Shape{
				Family: "bucket", Seed: 4, Items: 20000,
				Requests: func() quotasim.Quota { return &quotasim.TokenBucket{PerSecond: 600, Burst: 600} },
				Latency:  quotasim.Uniform(2*time.Second, 3*time.Second),
				Retry:    quotasim.Absent, Refusal: 20 * time.Millisecond,
			},
			floor: 0.38, most429: 0.01,
		},
		{
			// A server's cap on calls in progress, found again at the
			// same level event after event: each look one call above
			// it costs a 429, and a look every few round trips spent
			// 1.5% of the calls in refusals on a cap of eight.
			name: "server cap of 8 in progress, 150-260 ms calls, bare 429s",
			shape: quotasim.Shape{
				Family: "cap", Seed: 5, Items: 10000, Cap: 8,
				Latency: quotasim.Uniform(150*time.Millisecond, 260*time.Millisecond),
				Retry:   quotasim.Absent, Refusal: 30 * time.Millisecond,
			},
			floor: 0.95, most429: 0.007,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raceSkip(t, i+1) // not the first, a minute's 4,992 calls: 65 s under -race
			tc.shape.Name = tc.name
			n := max(tc.seeds, 1)
			var goodput, share float64
			for i := range n {
				sh := tc.shape
				sh.Seed += uint64(i)
				r := quotasim.Run(sh, NewVirtual(Config{}))
				if r.Stalled != "" || r.Done != sh.Items {
					t.Fatalf("seed %d: %d of %d items done (%s)", sh.Seed, r.Done, sh.Items, r.Stalled)
				}
				if n == 1 && (r.Goodput() < tc.floor || r.Share() > tc.most429) {
					t.Errorf("goodput %.3f at %.2f%% 429s (%v against the perfect client's %v); want at least %.2f at most %.1f%%",
						r.Goodput(), 100*r.Share(), r.Wall.Round(time.Second), r.Perfect.Round(time.Second), tc.floor, 100*tc.most429)
				}
				goodput += r.Goodput() / float64(n)
				share += r.Share() / float64(n)
			}
			if n > 1 && (goodput < tc.floor || share > tc.most429) {
				t.Errorf("mean of %d seeds: goodput %.3f at %.2f%% 429s; want at least %.2f at most %.1f%%",
					n, goodput, 100*share, tc.floor, 100*tc.most429)
			}
		})
	}
}
