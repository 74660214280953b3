package cli

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// memLearned is a learnedStore in memory.
type memLearned map[string]int

func (m memLearned) SetLearnedLimit(key string, n int) error { m[key] = n; return nil }
func (m memLearned) LearnedLimit(key string) int             { return m[key] }

// What a run saves is what the next one reads: the limit under the
// stage's name, the rate the quota showed in starts per minute beside it;
// a rate alone, with no limit, is not used, nor the paced rate older
// versions kept (under .rate_per_min), which may be a small night's pace.
func TestLearnedState(t *testing.T) {
	tests := []struct {
		name      string
		saved     memLearned
		wantLimit int
		wantRate  float64
	}{
		{"nothing saved", memLearned{}, 0, 0},
		{"a limit only (an older version's)", memLearned{"classify": 12}, 12, 0},
		{"a limit and a rate", memLearned{"classify": 12, "classify.quota_rate_per_min": 5400}, 12, 90},
		{"a limit and an older version's paced rate", memLearned{"classify": 12, "classify.rate_per_min": 5400}, 12, 0},
		{"a rate with no limit", memLearned{"classify.quota_rate_per_min": 5400}, 0, 0},
		{"another stage's", memLearned{"other": 3, "other.quota_rate_per_min": 60}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit, rate := learnedState(tt.saved, "classify")
			if limit != tt.wantLimit || rate != tt.wantRate {
				t.Errorf("learnedState = %d, %v; want %d, %v", limit, rate, tt.wantLimit, tt.wantRate)
			}
		})
	}
}

// A limiter the quota never bounded (given --start by hand, or a night
// too small to meet the quota) saves no rate: a rate an earlier run found
// stays, so the next run does not climb into a quota already found, and
// an older version's paced rate is cleared; one the quota bounded saves
// the rate it found.
func TestSaveLearnedState(t *testing.T) {
	refused := limiter.New(limiter.Config{Start: 7, StartRate: 90})
	tests := []struct {
		name  string
		lim   pipeline.Limiter
		saved memLearned
		want  memLearned
	}{
		{"never bounded keeps the rate found before", limiter.New(limiter.Config{Start: 7}),
			memLearned{"classify.quota_rate_per_min": 5400, "classify.rate_per_min": 600},
			memLearned{"classify": 7, "classify.quota_rate_per_min": 5400, "classify.rate_per_min": 0}},
		{"never bounded, none found before", limiter.New(limiter.Config{Start: 7}),
			memLearned{},
			memLearned{"classify": 7}},
		{"started from a rate found", refused,
			memLearned{},
			memLearned{"classify": 7, "classify.quota_rate_per_min": 5400}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := saveLearnedState(tt.saved, "classify", tt.lim); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(tt.saved) != fmt.Sprint(tt.want) {
				t.Errorf("saved %v; want %v", tt.saved, tt.want)
			}
		})
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
	// Before any call: a limiter started from the learned rate hands it
	// on whole (it paces 97% of it, see limiter.TestLaw_learnedStart);
	// one that ignored it would read 0.
	if got := lim.Rate(); got != rate {
		t.Errorf("the next run's limiter hands on %v starts per second before any call; want the learned %v", got, rate)
	}
	if got := lim.Limit(); got != min(limit, limiter.DefaultCeiling) {
		t.Errorf("the next run's limit %d, want the learned %d", got, limit)
	}

	if l := build(5); l.(*limiter.AIMD).Rate() != 0 || l.Limit() != 5 {
		t.Errorf("with --start 5: limit %d; want no learned rate and the limit 5", l.Limit())
	}
}

// A learned limit with no rate beside it (the quota never bounded the
// run that left it, or an older version saved no rate) is climbed from
// in slow start: one more call per success, not the rate the limit
// carries paced from the first round trip (which keeps the limit where
// it was); a learned rate is paced just under.
func TestAddLimiters_learnedLimitWithNoRateClimbs(t *testing.T) {
	tests := []struct {
		name      string
		saved     memLearned
		start     int     // the job's limiter start, 0 for none
		wantLimit int     // after one success; -1: any
		wantRate  float64 // Rate before any call: the rate it would hand on
	}{
		{"a limit and no rate", memLearned{"classify": 5}, 0, 6, 0},
		{"a limit and a rate", memLearned{"classify": 5, "classify.quota_rate_per_min": 6000}, 0, -1, 100},
		{"a limit and an older version's paced rate", memLearned{"classify": 5, "classify.rate_per_min": 6000}, 0, 6, 0},
		{"a start given by hand", memLearned{"classify": 9}, 5, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := store.Open(filepath.Join(t.TempDir(), "run.db"), store.Options{Stages: namedStages()})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for key, n := range tt.saved {
				if err := db.SetLearnedLimit(key, n); err != nil {
					t.Fatal(err)
				}
			}
			j := &job.Job{Stages: []job.Stage{{LLM: &job.LLM{Name: "classify", Preset: job.PresetClassify, Output: job.Output{Label: []string{"a", "b"}}, Limiter: job.Limiter{Start: tt.start}}}}}
			b, err := buildJob(context.Background(), j, buildOptions{APIKey: geminisim.DefaultAPIKey})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.addLimiters(context.Background(), db, nil); err != nil {
				t.Fatal(err)
			}
			lim, ok := b.limiters["classify"].(*limiter.AIMD)
			if !ok {
				t.Fatalf("classify's limiter is a %T, want a *limiter.AIMD", b.limiters["classify"])
			}
			if got := lim.Rate(); math.Abs(got-tt.wantRate) > 1e-9 {
				t.Errorf("rate %v before any call, want %v", got, tt.wantRate)
			}
			started, err := lim.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			lim.Succeeded(started, 100)
			if got := lim.Limit(); tt.wantLimit >= 0 && got != tt.wantLimit {
				t.Errorf("limit %d after one success, want %d", got, tt.wantLimit)
			}
		})
	}
}
