package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// randomShape draws one quota shape from the families the law must serve
// without having been tuned on them: a sliding log, a fixed window (at a
// random phase), a token bucket, or a server cap on calls in flight; a
// rate of 20-1,000 calls a second (log-uniform), windows of 0.5-10 s,
// latencies of 50 ms-2 s with jitter, a heavy tail one time in five,
// retryDelay exact, coarse or absent, the budget named or not, and one
// time in four a drift that halves the quota for a third of the run.
func randomShape(rng *rand.Rand, i int) quotaShape {
	rate := math.Exp(math.Log(20) + rng.Float64()*(math.Log(1000)-math.Log(20)))
	window := time.Duration((0.5 + rng.Float64()*9.5) * float64(time.Second)).Round(100 * time.Millisecond)
	items := 1000 + rng.IntN(5000)
	base := time.Duration(50+rng.IntN(1950)) * time.Millisecond
	lat := uniform(base, base+time.Duration(float64(base)*rng.Float64()))
	tail := ""
	if rng.IntN(5) == 0 {
		lat, tail = pareto(base, 1.2+rng.Float64(), 2*time.Millisecond, 20*base), " tail"
	}
	retry := retryMode(rng.IntN(3))
	named := rng.IntN(2) == 0
	var dr drift
	if rng.IntN(4) == 0 {
		third := time.Duration(float64(items) / rate / 3 * float64(time.Second))
		dr = drift{{third, 50}, {2 * third, 100}}
	}
	limit := max(1, int(rate*window.Seconds()))
	sh := quotaShape{items: items, refusal: 20 * time.Millisecond, retry: retry, latency: lat}
	family := rng.IntN(4)
	switch family {
	case 0:
		sh.quota = func() quotaModel { return &slidingLog{limit: limit, window: window, drift: dr} }
	case 1:
		phase := time.Duration(rng.Float64() * float64(window))
		sh.quota = func() quotaModel { return &fixedWindow{limit: limit, window: window, drift: dr, phase: phase} }
	case 2:
		burst := 1 + rng.Float64()*rate/5
		sh.quota = func() quotaModel { return &tokenBucket{perSecond: rate, burst: burst, drift: dr} }
	case 3:
		sh.conc = 8 + rng.IntN(200)
		sh.quota = func() quotaModel { return unlimited{} }
		named, dr = false, nil
	}
	if named {
		sh.namedRPM = int64(rate * 60)
		sh.namedDrift = dr
	}
	kinds := []string{"sliding", "fixed", "bucket", "cap"}
	retries := []string{"exact", "coarse", "absent"}
	sh.name = fmt.Sprintf("#%d %s %.0f/s w%s lat%s%s %s named=%v drift=%v items=%d",
		i, kinds[family], rate, window, base, tail, retries[retry], named, dr != nil, items)
	if family == 3 {
		sh.name = fmt.Sprintf("#%d cap %d lat%s%s items=%d", i, sh.conc, base, tail, items)
	}
	return sh
}

// TestLaw_randomFamilies measures the law on quota shapes drawn at random
// (randomShape), in virtual time, and logs the distribution: p10, median
// and worst goodput against the perfect client, the 429 share and calls
// per item, with each shape so any case can be replayed. It runs only when
// asked, since it measures rather than asserts:
//
//	SAWTOOTH_RANDOM_SHAPES=60 SAWTOOTH_RANDOM_SEED=7 go test -run TestLaw_randomFamilies -v ./limiter
//
// Draw a fresh seed for each measurement: a seed tuned on is no longer a
// measurement.
func TestLaw_randomFamilies(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SAWTOOTH_RANDOM_SHAPES"))
	if n <= 0 {
		t.Skip("set SAWTOOTH_RANDOM_SHAPES=N (and SAWTOOTH_RANDOM_SEED=S) to measure the law on N random quota shapes")
	}
	seed, _ := strconv.ParseUint(os.Getenv("SAWTOOTH_RANDOM_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	type result struct {
		name                    string
		goodput, share, perCall float64
	}
	var rs []result
	for i := range n {
		sh := randomShape(rng, i)
		r := simulate(sh, Config{}, seed*1000+uint64(i)+1)
		rs = append(rs, result{sh.name, r.goodput, r.share(), r.callsPerItem()})
	}
	pick := func(f func(result) float64, q float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[min(len(v)-1, int(q*float64(len(v))))]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d random shapes, seed %d\n", n, seed)
	fmt.Fprintf(&b, "goodput   p10 %.3f  median %.3f  worst %.3f\n", pick(func(r result) float64 { return r.goodput }, 0.1), pick(func(r result) float64 { return r.goodput }, 0.5), pick(func(r result) float64 { return r.goodput }, 0))
	fmt.Fprintf(&b, "429 share median %.2f%%  p90 %.2f%%  worst %.2f%%\n", 100*pick(func(r result) float64 { return r.share }, 0.5), 100*pick(func(r result) float64 { return r.share }, 0.9), 100*pick(func(r result) float64 { return r.share }, 1))
	fmt.Fprintf(&b, "calls/item median %.3f  worst %.3f\n", pick(func(r result) float64 { return r.perCall }, 0.5), pick(func(r result) float64 { return r.perCall }, 1))
	byFamily := map[string][]float64{}
	for _, r := range rs {
		family := strings.Fields(r.name)[1]
		byFamily[family] = append(byFamily[family], r.goodput)
	}
	for _, family := range []string{"sliding", "fixed", "bucket", "cap"} {
		g := byFamily[family]
		if len(g) == 0 {
			continue
		}
		slices.Sort(g)
		fmt.Fprintf(&b, "  %-8s %3d shapes: goodput p10 %.3f  median %.3f  worst %.3f\n", family, len(g), g[len(g)/10], g[len(g)/2], g[0])
	}
	slices.SortFunc(rs, func(a, b result) int { return int(math.Copysign(1, a.goodput-b.goodput)) })
	for _, r := range rs[:min(len(rs), 8)] {
		fmt.Fprintf(&b, "  worst: %.3f goodput, %.2f%% 429s, %.3f calls/item  %s\n", r.goodput, 100*r.share, r.perCall, r.name)
	}
	t.Log(b.String())
}
