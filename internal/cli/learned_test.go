package cli

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// memLearned is a learnedStore in memory.
type memLearned map[string]int

func (m memLearned) SetLearnedLimit(key string, n int) error { m[key] = n; return nil }
func (m memLearned) LearnedLimit(key string) int             { return m[key] }

// What a run saves is what the next one reads: the limit under the
// stage's name, the rate in starts per minute beside it; a rate alone,
// with no limit, is not used.
func TestLearnedState(t *testing.T) {
	tests := []struct {
		name      string
		saved     memLearned
		wantLimit int
		wantRate  float64
	}{
		{"nothing saved", memLearned{}, 0, 0},
		{"a limit only (an older version's)", memLearned{"classify": 12}, 12, 0},
		{"a limit and a rate", memLearned{"classify": 12, "classify.rate_per_min": 5400}, 12, 90},
		{"a rate with no limit", memLearned{"classify.rate_per_min": 5400}, 0, 0},
		{"another stage's", memLearned{"other": 3, "other.rate_per_min": 60}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit, rate := learnedState(tt.saved, "classify")
			if limit != tt.wantLimit || rate != tt.wantRate {
				t.Errorf("learnedState = %d, %v; want %d, %v", limit, rate, tt.wantLimit, tt.wantRate)
			}
		})
	}

	// A limiter that paced nothing saves a rate of 0, so the last run's
	// rate is not reused with this run's limit.
	db := memLearned{"classify.rate_per_min": 5400}
	if err := saveLearnedState(db, "classify", limiter.New(limiter.Config{Start: 7})); err != nil {
		t.Fatal(err)
	}
	if db["classify"] != 7 || db["classify.rate_per_min"] != 0 {
		t.Errorf("saved %v; want the limit 7 and no rate", db)
	}
}

// A run against a quota that pushes back saves the rate its limiter
// learned, and the next run's limiter starts paced just under it (not at
// the rate its limit carries once a round trip is measured); --start
// given by hand starts from that limit alone.
func TestRun_nextRunStartsAtLearnedRate(t *testing.T) {
	if testing.Short() {
		t.Skip("drains items against the simulator for a few seconds")
	}
	url := startTestSim(t)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 300); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--timeout", "60s", "--quiet"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}

	d, err := openReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	limit, rate := learnedState(d, "classify")
	if limit < 1 || rate <= 0 {
		t.Fatalf("learned limit %d, rate %v per second: want both saved (the quota pushed back)", limit, rate)
	}

	build := func(start int) pipeline.Limiter {
		t.Helper()
		j := &job.Job{Stages: []job.Stage{{LLM: &job.LLM{Name: "classify", Preset: job.PresetClassify, Output: job.Output{Label: []string{"a", "b"}}, Limiter: job.Limiter{Start: start}}}}}
		b, err := buildJob(context.Background(), j, buildOptions{APIKey: geminisim.DefaultAPIKey})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.addLimiters(context.Background(), d, nil); err != nil {
			t.Fatal(err)
		}
		return b.limiters["classify"]
	}
	lim, ok := build(0).(*limiter.AIMD)
	if !ok {
		t.Fatalf("classify's limiter is a %T, want a *limiter.AIMD", build(0))
	}
	// Before any call: a limiter that paces from its first start reads
	// its rate at once; one that would pace only after a round trip
	// reads 0.
	if got := lim.Rate(); got < 0.9*rate || got > rate {
		t.Errorf("the next run's limiter starts at %v starts per second; want just under the learned %v", got, rate)
	}
	if got := lim.Limit(); got != min(limit, limiter.DefaultCeiling) {
		t.Errorf("the next run's limit %d, want the learned %d", got, limit)
	}

	if l := build(5); l.(*limiter.AIMD).Rate() != 0 || l.Limit() != 5 {
		t.Errorf("with --start 5: limit %d; want no learned rate and the limit 5", l.Limit())
	}
}
