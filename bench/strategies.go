package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Strategy is one way of driving the classify stage: how many workers, which
// limiter, how a 429 is retried.
type Strategy struct {
	// Name is the short name used on the command line and in tables.
	Name string
	// Description says in one line what the strategy is and where it
	// comes from.
	Description string
	// Classify returns the classify stage's configuration for one run,
	// given the real stage. It is called once per run, so it must build a
	// fresh limiter each time. It may wrap the stage; a wrapper with a
	// GaveUp() int64 method reports items it abandoned (counted as lost).
	Classify func(stage pipeline.Stage) pipeline.StageConfig
}

// Strategy names, in the order Strategies returns them.
const (
	AIMD       = "aimd"
	SeedAIMDs  = "seed-aimd"
	Fixed64    = "fixed-64"
	Fixed8     = "fixed-8"
	Backoff100 = "backoff-100"
)

// Strategies returns every strategy, ours first:
//
//   - aimd: `sawtooth run` with its defaults: limiter.New(limiter.Config{})
//     (start 8, floor 1, ceiling 512) and a worker per call it may let
//     be in flight.
//   - seed-aimd: the first seed's limiter exactly (SeedAIMD) behind its 128
//     workers; a 429'd item is retried at once, forever (the seed requeues
//     it with no limit, so our engine's stop after 200 refusals in a row is
//     turned off).
//   - fixed-64, fixed-8: `sawtooth run --fixed N`: N slots and no
//     adaptation; the server's retry delay is still honoured.
//   - backoff-100: the second seed: 100 workers, no limiter, each retrying
//     in place with exponential backoff and jitter (SeedBackoff).
func Strategies() []Strategy {
	return []Strategy{
		{
			Name:        AIMD,
			Description: "ours: AIMD on calls in flight, one decrease per congestion event, retryDelay honoured (sawtooth run defaults)",
			Classify: func(s pipeline.Stage) pipeline.StageConfig {
				l := limiter.New(limiter.Config{})
				return pipeline.StageConfig{Stage: s, Workers: l.MostInFlight(), Limiter: l}
			},
		},
		{
			Name:        SeedAIMDs,
			Description: "seed 000: +1 per success outside a 4s cooldown, x0.5 on every 429, floor 2, ceiling 96, 128 workers, 429s requeued at once",
			Classify: func(s pipeline.Stage) pipeline.StageConfig {
				return pipeline.StageConfig{Stage: s, Workers: 128, Limiter: NewSeedAIMD(), MaxRateLimited: math.MaxInt32}
			},
		},
		fixed(Fixed64, 64),
		fixed(Fixed8, 8),
		{
			Name:        Backoff100,
			Description: "seed 001: 100 workers, no limiter, retry in place after 2s x 2^(n-1) + 0.5-1.5s jitter, give up after 5 calls",
			Classify: func(s pipeline.Stage) pipeline.StageConfig {
				return pipeline.StageConfig{Stage: &SeedBackoff{Stage: s, Base: 2 * time.Second, MaxAttempts: 5}, Workers: 100, MaxAttempts: 1}
			},
		},
	}
}

func fixed(name string, n int) Strategy {
	return Strategy{
		Name:        name,
		Description: fmt.Sprintf("a fixed pool of %d calls in flight, no adaptation, retryDelay honoured (sawtooth run --fixed %d)", n, n),
		Classify: func(s pipeline.Stage) pipeline.StageConfig {
			return pipeline.StageConfig{Stage: s, Workers: n, Limiter: limiter.NewFixed(n)}
		},
	}
}

// Lookup returns the named strategies in the order given; an empty list
// means all of them.
func Lookup(names []string) ([]Strategy, error) {
	all := Strategies()
	if len(names) == 0 {
		return all, nil
	}
	var out []Strategy
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Name == n {
				out = append(out, s)
				found = true
				break
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("unknown strategy %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}
