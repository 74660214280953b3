package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestFleet_FairShare is a bench, run with SAWTOOTH_FLEET_BENCH=1: one
// simulator quota (100 requests a second) that four blind workers would
// overrun many times over, drained by 1 worker (its own AIMD, or the
// shared quota), by 4 sharing the quota through PostgreSQL, and by 4 with
// independent limiters, each with the rate unknown (the 429s name no
// quota value) and known (--rpm). It prints, per setup, the quota used in
// the steady part of the drain, the 429 share of calls, the calls per
// item, and Jain's fairness index over the workers' classify outcomes.
func TestFleet_FairShare(t *testing.T) {
	if os.Getenv("SAWTOOTH_FLEET_BENCH") != "1" {
		t.Skip("a bench of about two minutes: set SAWTOOTH_FLEET_BENCH=1")
	}
	const perSecond = 100
	items := pick(2000, 6000)
	type setup struct {
		name    string
		workers int
		extra   []string
	}
	var setups []setup
	for _, known := range []bool{false, true} {
		rate, extra := "rate unknown", []string(nil)
		if known {
			rate, extra = "--rpm known", []string{"--rpm", fmt.Sprint(perSecond * 60)}
		}
		independent := append([]string{"--quota", "independent"}, extra...)
		setups = append(setups,
			setup{"1 worker, its own AIMD, " + rate, 1, independent},
			setup{"1 worker, shared quota, " + rate, 1, extra},
			setup{"4 workers, shared quota, " + rate, 4, extra},
			setup{"4 workers, independent AIMD, " + rate, 4, independent},
		)
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			url := startPostgres(t)
			dir := t.TempDir()
			input := writeItems(t, dir, items, 5)
			sim, simURL := startSim(t, geminisim.Config{
				RPM: perSecond, Window: time.Second,
				Latency: geminisim.Latency{Base: 80 * time.Millisecond, Jitter: 40 * time.Millisecond},
				// The 429s name no quota value: with a 1 s window it would
				// be a per-second figure a limiter reads as per minute, and
				// the bench is about finding an unknown rate.
				QuotaFailure: geminisim.QuotaFailureNoValue,
				Seed:         5,
			})
			env := simEnv(simURL)
			args := append([]string{"run", "--db", url, "--quiet", "--timeout", "20s", "--ceiling", "32", "--lease", "30s"}, s.extra...)
			// Ingest first (no calls), so every worker starts on a full queue.
			ingest(t, url, input, items)
			start := time.Now()
			var wg sync.WaitGroup
			for range s.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if code, _, errs := sawtooth(t, env, args...); code != 0 {
						t.Errorf("worker exit %d: %s", code, tail(errs, 1500))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			st := sim.Stats()
			calls := st.Calls
			limited := st.Outcomes[geminisim.OutcomeRateLimited]
			used := steadyUse(st.Timeline, perSecond)
			db := openFleetDB(t, url)
			runs, err := db.Runs(100)
			if err != nil {
				t.Fatal(err)
			}
			var shares []float64
			for _, r := range runs {
				if c := r.Stages["classify"]; c != nil && r.Status != "stopped" { // the ingest run parks
					shares = append(shares, float64(c.Done+c.Dead))
				}
			}
			t.Logf("FIGURES | fairness | %s | quota used %.1f%% (steady), 429s %.2f%% of %d calls, %.3f calls an item, Jain %.3f over %d workers, %d items in %s; 429s by second: %s",
				s.name, 100*used, 100*float64(limited)/float64(max(calls, 1)), calls, float64(calls)/float64(items), jain(shares), len(shares), items, elapsed.Round(100*time.Millisecond), refusals(st.Timeline))
		})
	}
}

// ingest stores the input in the pipeline at url without calling the API:
// a run whose API is unreachable parks at once (exit 3) after ingesting.
func ingest(t *testing.T, url, input string, items int) {
	t.Helper()
	r := run(t, []string{"GEMINI_API_KEY=x", "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:1"}, "run", "--db", url, "--input", input, "--quiet", "--max-outage", "1s", "--lease", "2s")
	if r.code != 3 {
		t.Fatalf("ingest run exit %d: %s", r.code, tail(r.err, 1500))
	}
	db := openFleetDB(t, url)
	c, err := db.Counts()
	if err != nil || c.Items != items {
		t.Fatalf("ingested %d items (%v), want %d", c.Items, err, items)
	}
	// Let the parked run's leases lapse, so the workers start on the
	// whole queue.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		hs, err := db.Holders(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// steadyUse is the mean admitted requests per second over the timeline's
// seconds between the first 2 and the last 2, over the quota.
func steadyUse(tl []geminisim.Bucket, perSecond int) float64 {
	sort.Slice(tl, func(i, j int) bool { return tl[i].Second < tl[j].Second })
	if len(tl) < 6 {
		return math.NaN()
	}
	var sum int64
	steady := tl[2 : len(tl)-2]
	for _, b := range steady {
		sum += b.Admitted
	}
	span := steady[len(steady)-1].Second - steady[0].Second + 1
	return float64(sum) / float64(span) / float64(perSecond)
}

// refusals lists the seconds of the timeline that had 429s, as
// "second:count", to show whether they came from the start (slow start
// finding the quota) or later (probing above it).
func refusals(tl []geminisim.Bucket) string {
	var b strings.Builder
	for _, x := range tl {
		if x.RateLimited > 0 {
			fmt.Fprintf(&b, "%d:%d ", x.Second, x.RateLimited)
		}
	}
	return strings.TrimSpace(b.String())
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when
// one has everything.
func jain(xs []float64) float64 {
	var s, sq float64
	for _, x := range xs {
		s += x
		sq += x * x
	}
	if sq == 0 {
		return math.NaN()
	}
	return s * s / (float64(len(xs)) * sq)
}
