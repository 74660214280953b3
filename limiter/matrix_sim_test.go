package limiter

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// matrixShapes are the real-time quota matrix's shapes (bench.Shapes,
// `sawtooth bench --matrix`) in virtual time: the same quotas, windows,
// latencies, retry delays and named budgets, 6000 items each. A real-time
// figure far below its virtual one points at something other than the
// law: the runner, the simulator's HTTP, the machine. The drifting
// sliding window names its live budget, as the real-time simulator does;
// tpm-counted's prompts vary in tokens and its refused calls are charged
// (see tpmCountedShape). tail-load-503's bursts are held by a copy of the
// runner's overload hold (see simHold), and its refusals take 2 ms, as a
// local server's 503 does: each call sent into a burst before the first
// refusal comes back is a call wasted, and they are rate × that round
// trip. A rate paced evenly between holds is at most the quota's 200 in
// any hold-free second, so at most 200 × 1.3 s / 1.5 s ≈ 173 a second
// over the run, 0.88 of the perfect client, which fills the room each
// burst leaves in the window at once after it. The law reads the window
// at slow start's 429 (or, with rounded delays, its first reopening) and
// sends by it as the perfect client does (see catchup.go); the fixed
// windows' first calls come at the start of a window, where slow start's
// 429 (or the probes after it) read like a sliding log's, and the law
// sends by a sliding window of that length, which they admit.
func matrixShapes() []quotaShape {
	const (
		items   = 6000
		refusal = 20 * time.Millisecond
		perMin  = 200 * 60 // the 200-a-second quotas' budget per minute
	)
	third := 12 * time.Second // bench.HalfForAThird of 6000 items at 200 a second
	down := drift{{third, 50}, {2 * third, 100}}
	lat := uniform(100*time.Millisecond, 150*time.Millisecond)
	return []quotaShape{
		{name: "sliding-drift", floor: 0.94, items: items, refusal: refusal, retry: retryExact, namedRPM: perMin, namedDrift: down,
			quota:   func() quotaModel { return &slidingLog{limit: 200, window: time.Second, drift: down} },
			latency: uniform(250*time.Millisecond, 350*time.Millisecond)},
		{name: "sliding-coarse", floor: 0.923, items: items, refusal: refusal, retry: retryCoarse, namedRPM: perMin,
			quota:   func() quotaModel { return &slidingLog{limit: 400, window: 2 * time.Second} },
			latency: uniform(80*time.Millisecond, 120*time.Millisecond)},
		{name: "fixed-exact", floor: 0.946, items: items, refusal: refusal, retry: retryExact, namedRPM: perMin,
			quota: func() quotaModel { return &fixedWindow{limit: 200, window: time.Second} }, latency: lat},
		{name: "fixed-noretry", floor: 0.936, items: items, refusal: refusal, retry: retryAbsent, namedRPM: perMin,
			quota: func() quotaModel { return &fixedWindow{limit: 200, window: time.Second} }, latency: lat},
		{name: "bucket-burst", floor: 0.96, items: items, refusal: refusal, retry: retryExact, namedRPM: perMin,
			quota: func() quotaModel { return &tokenBucket{perSecond: 200, burst: 10} }, latency: lat},
		{name: "bucket-drift-noretry", floor: 0.96, items: items, refusal: refusal, retry: retryAbsent,
			quota: func() quotaModel { return &tokenBucket{perSecond: 200, burst: 20, drift: down} }, latency: lat},
		{name: "cap-bare429", floor: 0.95, items: items, refusal: refusal, retry: retryAbsent, conc: 24,
			quota: func() quotaModel { return unlimited{} }, latency: lat},
		{name: "tail-load-503", floor: 0.949, items: items, refusal: 2 * time.Millisecond, retry: retryExact, namedRPM: perMin,
			quota:    func() quotaModel { return &slidingLog{limit: 200, window: time.Second} },
			latency:  pareto(50*time.Millisecond, 1.3, 2*time.Millisecond, 4*time.Second),
			overload: bursts{every: 1500 * time.Millisecond, dur: 200 * time.Millisecond}},
		withFloor(tpmCountedShape(items, refusal), 0.945),
		// bench --long: slow start spends a real minute's quota in its
		// first 19 s and meets the window again when it reopens (see
		// replay.go); the perfect client sends the window's 1,800 at
		// once, with as many workers as the law kept in flight.
		{name: "minute-ample", floor: 0.93, items: 1850, refusal: refusal, retry: retryExact, namedRPM: 1800,
			quota:   func() quotaModel { return &slidingLog{limit: 1800, window: time.Minute} },
			latency: uniform(time.Second, 3*time.Second)},
	}
}

// The law on the real-time matrix's shapes in virtual time holds the
// bar's 429 share and calls per item, and its goodput does not fall below
// what it reached when the real-time matrix was last measured against it
// (bench/RESULTS.md gives both tables side by side).
func TestLaw_matrixShapes(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-26s %8s %8s %10s\n", "matrix shape (median of 5)", "goodput", "429s", "calls/item")
	for i, sh := range matrixShapes() {
		t.Run(sh.name, func(t *testing.T) {
			raceSkip(t, i)
			goodput, share, perItem := medianRun(sh, Config{})
			fmt.Fprintf(&table, "%-26s %8.3f %7.2f%% %10.3f\n", sh.name, goodput, 100*share, perItem)
			if share > bar429 || perItem > barCallsPerItem {
				t.Errorf("%.2f%% of calls refused, %.3f calls per item; want at most %.0f%% and %.2f", 100*share, perItem, 100*bar429, barCallsPerItem)
			}
			if goodput < sh.floor {
				t.Errorf("goodput %.3f of the perfect client's; want at least %.2f", goodput, sh.floor)
			}
		})
	}
	t.Log(table.String())
}

// withFloor returns sh with its goodput floor set to floor.
func withFloor(sh quotaShape, floor float64) quotaShape {
	sh.floor = floor
	return sh
}

// unnamedShape is a matrix shape whose 429s name no budget (`sawtooth
// bench --matrix --unnamed`): proxies, Vertex and some servers send no
// quotaValue, and the law must find each quota by its refusals alone.
type unnamedShape struct {
	quotaShape
	// overBar, when set, says why the law refuses more than the bar's
	// share of calls there, or makes more calls per item; neither is
	// then asserted.
	overBar string
}

// unnamedShapes are the matrix's shapes whose 429s name a budget, with
// the budget taken out, each with the goodput its law reached when last
// measured as its floor.
func unnamedShapes() []unnamedShape {
	floors := map[string]float64{
		"sliding-drift": 0.89, "sliding-coarse": 0.91, "fixed-exact": 0.96, "fixed-noretry": 0.93,
		"bucket-burst": 0.98, "tail-load-503": 0.87, "tpm-counted": 0.87, "minute-ample": 0.93,
	}
	overBar := map[string]string{
		"tail-load-503": "1.011 calls per item: the 503 bursts' calls (sent into one before its first refusal comes back) beside the 429s of a quota found by refusals",
		"tpm-counted":   "a token budget no 429 names, and refused calls charged against it: the law reads requests refused at a rate of requests that moves with the prompts' lengths",
	}
	var out []unnamedShape
	for _, sh := range matrixShapes() {
		if sh.namedRPM == 0 && sh.namedTPM == 0 {
			continue // already unnamed
		}
		sh.namedRPM, sh.namedTPM, sh.namedDrift = 0, 0, nil
		floor, ok := floors[sh.name]
		if !ok {
			panic(fmt.Sprintf("unnamed %s: no goodput floor", sh.name))
		}
		sh.floor = floor
		out = append(out, unnamedShape{quotaShape: sh, overBar: overBar[sh.name]})
	}
	return out
}

// The law on the matrix's shapes with no budget named holds the bar's
// 429 share and calls per item (but where overBar says why not), and its
// goodput does not fall below what it reached when last measured.
func TestLaw_matrixShapesUnnamed(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-26s %8s %8s %10s\n", "unnamed (median of 5)", "goodput", "429s", "calls/item")
	for i, sh := range unnamedShapes() {
		t.Run(sh.name, func(t *testing.T) {
			raceSkip(t, i)
			goodput, share, perItem := medianRun(sh.quotaShape, Config{})
			fmt.Fprintf(&table, "%-26s %8.3f %7.2f%% %10.3f\n", sh.name, goodput, 100*share, perItem)
			over := share > bar429 || perItem > barCallsPerItem
			switch {
			case over && sh.overBar == "":
				t.Errorf("%.2f%% of calls refused, %.3f calls per item; want at most %.0f%% and %.2f", 100*share, perItem, 100*bar429, barCallsPerItem)
			case !over && sh.overBar != "":
				t.Errorf("%.2f%% of calls refused, %.3f calls per item: meets the bar, drop overBar", 100*share, perItem)
			}
			if goodput < sh.floor {
				t.Errorf("goodput %.3f of the perfect client's; want at least %.2f", goodput, sh.floor)
			}
		})
	}
	t.Log(table.String())
}
