package quotasim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Families are the kinds of quota Draw picks from, in order.
var Families = []string{"sliding", "fixed", "bucket", "cap", "tpm", "minute"}

// Draw returns n shapes: shape i is FromSeed(seed+i), so any one of them
// replays alone as Draw(1, its Seed).
func Draw(n int, seed uint64) []Shape {
	out := make([]Shape, n)
	for i := range out {
		out[i] = FromSeed(seed + uint64(i))
	}
	return out
}

// logUniform draws from [lo, hi] evenly in the logarithm.
func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
}

// FromSeed draws one shape from the families a law must serve without
// having been tuned on them: a sliding log, a fixed window at a random
// phase, a token bucket with its burst, a server cap on calls in
// progress, an input-token budget with prompts of a few sizes, or a real
// per-minute window of 60-30,000 requests. Rates are 20-1,000 calls a
// second and windows 0.5-10 s (or 60 s); latency 50 ms-5 s with jitter,
// a heavy tail one time in four; retryDelay exact, coarse or absent; the
// budget named or not (and one named budget in ten named wrong, per window
// instead of per minute); refused calls charged one time in four; one
// time in three a drift (a dip, a fall, a rise or a sawtooth); 1,000-20,000
// items.
func FromSeed(seed uint64) Shape {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	family := rng.IntN(len(Families))
	d := &draw{rng: rng, sh: Shape{
		Family:  Families[family],
		Seed:    seed,
		Items:   int(logUniform(rng, 1000, 20000)),
		Retry:   Retry(rng.IntN(3)),
		Refusal: time.Duration(10+rng.IntN(40)) * time.Millisecond,
	}}
	d.latName, d.roundTrip = drawLatency(rng, &d.sh)
	d.rate = logUniform(rng, 20, 1000)
	d.window = time.Duration((0.5 + rng.Float64()*9.5) * float64(time.Second)).Round(100 * time.Millisecond)
	d.named = rng.IntN(2) == 0
	d.charged = rng.IntN(4) == 0
	drifts := rng.IntN(3) == 0
	driftName := "none"
	switch d.sh.Family {
	case "sliding", "fixed", "minute":
		d.windowed()
	case "bucket":
		d.bucket()
	case "cap":
		d.sh.Cap = int(logUniform(rng, 8, 400))
		d.rate = float64(d.sh.Cap) / d.roundTrip.Seconds()
		d.sh.Requests, d.named, d.charged, drifts = nil, false, false, false
		d.sh.Retry = Absent
		d.quota = fmt.Sprintf("cap %d in progress", d.sh.Cap)
	case "tpm":
		d.tokens()
	}
	sh := &d.sh
	sh.Items = items(sh.Items, d.perWindow, d.rate*d.roundTrip.Seconds())
	if drifts {
		d.dr, driftName = drawDrift(rng, float64(sh.Items)/d.rate)
	}
	namedName := d.namedBudget()
	sh.Name = fmt.Sprintf("%s: %s, lat %s, retry %s, named %s, charged %v, drift %s, %d items, seed %d",
		sh.Family, d.quota, d.latName, sh.Retry, namedName, d.charged, driftName, sh.Items, seed)
	return *sh
}

// draw is one shape being drawn (FromSeed), the draws in FromSeed's
// order so that a seed keeps its shape.
type draw struct {
	rng *rand.Rand
	sh  Shape
	// rate is calls a second, window the quota's window.
	rate      float64
	window    time.Duration
	roundTrip time.Duration
	latName   string
	// named: the budget is named (NamedRPM, NamedTPM); charged: refused
	// calls count against it.
	named, charged bool
	// perWindow is the calls a window admits.
	perWindow float64
	// quota describes the quota for the shape's name.
	quota string
	// dr is the drift, drawn over the run's length, known once the quota
	// is: the quota funcs read it when a run starts.
	dr Drift
}

// windowed draws a sliding log or a fixed window, of a random window or
// (family minute) of a minute.
func (d *draw) windowed() {
	rng, sh := d.rng, &d.sh
	if sh.Family == "minute" {
		d.window = time.Minute
		d.rate = logUniform(rng, 60, 30000) / 60
		if rng.IntN(2) == 0 {
			sh.Latency, d.latName, d.roundTrip = Uniform(time.Second, 3*time.Second), "1s-3s", 2*time.Second
		}
	}
	window, charged := d.window, d.charged
	limit := max(1, int(math.Round(d.rate*window.Seconds())))
	d.perWindow = float64(limit)
	if sh.Family == "fixed" || (sh.Family == "minute" && rng.IntN(2) == 0) {
		phase := time.Duration(rng.Float64() * float64(window))
		sh.Requests = func() Quota {
			return &FixedWindow{Limit: limit, Window: window, Phase: phase, Drift: d.dr, Charged: charged}
		}
		d.quota = fmt.Sprintf("fixed %d per %v phase %v", limit, window, phase.Round(time.Millisecond))
	} else {
		sh.Requests = func() Quota { return &SlidingLog{Limit: limit, Window: window, Drift: d.dr, Charged: charged} }
		d.quota = fmt.Sprintf("sliding %d per %v", limit, window)
	}
	sh.NamedRPM = int64(float64(limit) * float64(time.Minute) / float64(window))
}

// bucket draws a token bucket and its burst.
func (d *draw) bucket() {
	rate, charged := d.rate, d.charged
	burst := max(1, math.Round(rate*logUniform(d.rng, 0.01, 2)))
	d.sh.Requests = func() Quota { return &TokenBucket{PerSecond: rate, Burst: burst, Drift: d.dr, Charged: charged} }
	d.quota = fmt.Sprintf("bucket %.1f/s burst %.0f", rate, burst)
	d.perWindow = burst
	d.sh.NamedRPM = int64(rate * 60)
}

// tokens draws an input-token budget and prompts of a few sizes.
func (d *draw) tokens() {
	rng, sh := d.rng, &d.sh
	if rng.IntN(2) == 0 {
		d.window = time.Minute
	}
	window, charged := d.window, d.charged
	mean, largest := drawPrompts(rng, sh)
	d.rate = logUniform(rng, 20, 500)
	budget := max(int(d.rate*window.Seconds()*mean), 4*largest)
	d.perWindow = float64(budget) / mean
	sh.Tokens = func() Quota { return &SlidingLog{Limit: budget, Window: window, Drift: d.dr, Charged: charged} }
	d.quota = fmt.Sprintf("tpm %d tokens per %v (~%.0f calls/s, mean %.0f tokens)", budget, window, d.rate, mean)
	sh.NamedTPM = int64(float64(budget) * float64(time.Minute) / float64(window))
}

// namedBudget names the budget, or not, or wrong (a window's count read
// as a minute's), and says which.
func (d *draw) namedBudget() string {
	sh := &d.sh
	switch {
	case !d.named:
		sh.NamedRPM, sh.NamedTPM = 0, 0
		return "no"
	case d.window != time.Minute && sh.Family != "bucket" && d.rng.IntN(10) == 0:
		sh.NamedRPM = sh.NamedRPM * int64(d.window) / int64(time.Minute)
		sh.NamedTPM = sh.NamedTPM * int64(d.window) / int64(time.Minute)
		sh.NamedDrift = d.dr
		return "wrong"
	default:
		sh.NamedDrift = d.dr
		return "yes"
	}
}

// items is the items of a run drawn as drawn, raised (to 20,000 at most)
// until the run spans minWindows of the quota's windows and minRoundTrips
// round trips. A run shorter than that measures what the perfect client
// knows beforehand, not how well a client learns: with a window's budget
// above the items, the perfect client sends them all at once, where any
// client that does not know the quota, held to 1% of 429s, must find out
// that it may.
func items(drawn int, perWindow, inFlight float64) int {
	need := max(minWindows*perWindow, minRoundTrips*inFlight)
	return max(drawn, min(maxItems, int(need)))
}

const (
	minWindows    = 4
	minRoundTrips = 20
	maxItems      = 20000
)

// drawLatency sets the shape's latency: a base of 50 ms-5 s with up to
// 100% jitter, or one time in four a heavy tail around it. It returns its
// name and its mean round trip.
func drawLatency(rng *rand.Rand, sh *Shape) (string, time.Duration) {
	base := time.Duration(logUniform(rng, 0.05, 5) * float64(time.Second)).Round(time.Millisecond)
	if rng.IntN(4) == 0 {
		sigma := 0.5 + 0.7*rng.Float64()
		sh.Latency = HeavyTail(base, sigma, base/10, 20*base)
		return fmt.Sprintf("%v tail %.1f", base, sigma), base
	}
	hi := base + time.Duration(rng.Float64()*float64(base))
	sh.Latency = Uniform(base, hi)
	return fmt.Sprintf("%v-%v", base, hi.Round(time.Millisecond)), (base + hi) / 2
}

// drawDrift draws a schedule over a run of about span seconds.
func drawDrift(rng *rand.Rand, span float64) (Drift, string) {
	third := time.Duration(span / 3 * float64(time.Second))
	low := 40 + rng.IntN(41)
	switch rng.IntN(4) {
	case 0:
		return Drift{{third, low}, {2 * third, 100}}, fmt.Sprintf("dip to %d%%", low)
	case 1:
		return Drift{{third, low}}, fmt.Sprintf("fall to %d%%", low)
	case 2:
		return Drift{{0, low}, {third, 100}}, fmt.Sprintf("rise from %d%%", low)
	}
	var d Drift
	step := third / 3
	for k := range 9 {
		d = append(d, Step{time.Duration(k) * step, []int{100, low}[k%2]})
	}
	return d, fmt.Sprintf("sawtooth 100/%d%%", low)
}

// drawPrompts gives the shape prompts of 2-5 sizes of 50-4,000 tokens,
// each size its own share of the items, and returns their mean and the
// largest.
func drawPrompts(rng *rand.Rand, sh *Shape) (mean float64, largest int) {
	k := 2 + rng.IntN(4)
	sizes, weights := make([]int, k), make([]float64, k)
	var total float64
	for i := range sizes {
		sizes[i] = int(logUniform(rng, 50, 4000))
		weights[i] = 0.2 + rng.Float64()
		largest = max(largest, sizes[i])
		total += weights[i]
	}
	for i := range sizes {
		weights[i] /= total
		mean += weights[i] * float64(sizes[i])
	}
	sh.Prompt = func(rng *rand.Rand) int {
		u := rng.Float64()
		for i, w := range weights {
			if u -= w; u < 0 {
				return sizes[i]
			}
		}
		return sizes[k-1]
	}
	return mean, largest
}
