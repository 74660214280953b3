package limiter

import (
	"slices"
	"testing"
	"time"
)

// Nights: runs that start from what the run before learned (its limit and
// Rate, as `sawtooth run` keeps them), some too small to fill what the law
// allows. Only what the quota showed may hold the next run back.

// nightQuota is the quota every night meets: 200 calls in any second.
func nightQuota(latency latencyModel) quotaShape {
	return quotaShape{
		name: "nights, sliding 200/s", items: 4000, refusal: 20 * time.Millisecond, retry: retryExact,
		quota:   func() quotaModel { return &slidingLog{limit: 200, window: time.Second} },
		latency: latency,
	}
}

// trickled is what a small night left behind.
type trickled struct {
	limit        int
	rate         float64
	calls, r429s int
}

// trickle drives a law configured by cfg through a small night on sh:
// items arrive at perSecond, each sent as soon as the law lets it and
// sent again at once after a 429, so the calls never fill what the law
// allows unless the quota refuses them. Virtual time steps a millisecond
// at a time.
func trickle(sh quotaShape, cfg Config, perSecond float64, items int, seed uint64) trickled {
	slowStart := cfg.slowStarts()
	cfg = cfg.withDefaults()
	w := newLaw(cfg, slowStart)
	s := newSimServer(sh, seed)
	type call struct {
		at, started time.Time
		ok          bool
		retryAfter  time.Duration
	}
	var (
		r           trickled
		inFlight    []call
		waiting     int
		arrived     int
		done        int
		t           = simEpoch
		tick        = time.Millisecond
		interval    = time.Duration(float64(time.Second) / perSecond)
		nextArrival = simEpoch
	)
	for done < items {
		for arrived < items && !nextArrival.After(t) {
			arrived++
			waiting++
			nextArrival = nextArrival.Add(interval)
		}
		kept := inFlight[:0]
		for _, c := range inFlight {
			switch {
			case c.at.After(t):
				kept = append(kept, c)
			case c.ok:
				w.onSuccess(t, c.started, simTokens, len(inFlight))
				done++
			default:
				w.onRateLimited(t, c.started, c.retryAfter, len(inFlight))
				waiting++
			}
		}
		inFlight = kept
		for waiting > 0 && w.mayStart(t, len(inFlight)) {
			started := w.start(t, len(inFlight))
			took, retryAfter, ok, _ := s.call(t, simTokens)
			inFlight = append(inFlight, call{t.Add(took), started, ok, retryAfter})
			waiting--
			r.calls++
			if !ok {
				r.r429s++
			}
		}
		t = t.Add(tick)
	}
	r.limit, r.rate = w.limit, w.learnedRate()
	return r
}

// nextNight is the Config `sawtooth run` builds from what the last run
// learned: its limit, and its rate when it has one, else slow start from
// the limit.
func nextNight(limit int, rate float64) Config {
	return Config{Start: limit, StartRate: rate, SlowStart: rate == 0}
}

// Two small nights that never met the quota, the second's calls slow (a
// loaded disk), then a night with far more work: it reaches the quota's
// pace at once, as a fresh run does. (Paced at what the slow night
// measured, 42 calls a second where the quota admits 200, it climbed to
// the quota in small stairs, each held for the quota's answer lag.)
func TestLaw_nights_demandIsNoQuota(t *testing.T) {
	fast := uniform(80*time.Millisecond, 120*time.Millisecond)
	sh := nightQuota(fast)
	for seed := range uint64(simSeeds) {
		first := trickle(sh, Config{}, 20, 200, seed+1)
		slow := trickle(nightQuota(uniform(time.Second, time.Second)), nextNight(first.limit, first.rate), 20, 200, seed+1)
		if first.r429s+slow.r429s > 0 || slow.rate != 0 {
			t.Errorf("seed %d: the small nights met %d 429s and learned %.1f calls a second; want none and no rate (the quota never bounded them)",
				seed+1, first.r429s+slow.r429s, slow.rate)
		}
		big := simulate(sh, nextNight(slow.limit, slow.rate), seed+1)
		fresh := simulate(sh, Config{}, seed+1)
		if big.goodput < fresh.goodput-0.02 || big.share() > bar429 {
			t.Errorf("seed %d: the big night after small ones: goodput %.3f with %.2f%% 429s; want at least a fresh run's %.3f - 0.02, at most %.0f%% 429s",
				seed+1, big.goodput, 100*big.share(), fresh.goodput, 100*bar429)
		}
		t.Logf("seed %d: the big night: goodput %.3f, %.2f%% 429s; a fresh run: %.3f, %.2f%%", seed+1, big.goodput, 100*big.share(), fresh.goodput, 100*fresh.share())
	}
}

// A night that found the quota (429s) hands its rate on; a small night
// after it meets no 429 and hands the same rate on, not 97% of it; the
// big night after starts just under it: no 429 in its first second,
// where a fresh run's slow start meets its burst, and the bar's goodput.
func TestLaw_nights_quotaFoundIsKept(t *testing.T) {
	sh := nightQuota(uniform(80*time.Millisecond, 120*time.Millisecond))
	var gs, ss []float64
	for seed := range uint64(simSeeds) {
		storm := simulate(sh, Config{}, seed+1)
		if storm.r429s == 0 || storm.firstRefused > time.Second || storm.rate <= 0 || storm.rate > 200 {
			t.Fatalf("seed %d: a fresh run met %d 429s, the first at %v, and learned %.1f calls a second; want 429s in its first second and a rate at most the quota's 200",
				seed+1, storm.r429s, storm.firstRefused, storm.rate)
		}
		small := trickle(sh, nextNight(storm.limit, storm.rate), 20, 200, seed+1)
		if small.r429s > 0 || small.rate < storm.rate {
			t.Errorf("seed %d: the small night met %d 429s and handed on %.1f calls a second; want none and at least the %.1f found",
				seed+1, small.r429s, small.rate, storm.rate)
		}
		big := simulate(sh, nextNight(small.limit, small.rate), seed+1)
		if big.firstRefused > 0 && big.firstRefused < time.Second {
			t.Errorf("seed %d: the big night met its first 429 at %v; want none in its first second", seed+1, big.firstRefused)
		}
		gs, ss = append(gs, big.goodput), append(ss, big.share())
	}
	slices.Sort(gs)
	slices.Sort(ss)
	if goodput, share := gs[simSeeds/2], ss[simSeeds/2]; goodput < barGoodput || share > bar429 {
		t.Errorf("the big nights: goodput %.3f with %.2f%% 429s (medians); want at least %.2f and at most %.0f%%", goodput, 100*share, barGoodput, 100*bar429)
	}
}
