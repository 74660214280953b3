package cli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// fingerprint hashes what decides a stage's output.
func fingerprint(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// mustJSON encodes a plain struct.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with plain structs
	}
	return b
}

// buildStages checks the flags, compiles them into their job (in is the
// input, bo the batch options) and builds it with the one builder. The
// stage definitions keep the settings under their flag names, as
// databases run from flags have always recorded them (keepStored and
// the refusal of a changed stage read them).
func (o *pipelineOptions) buildStages(ctx context.Context, in inputOptions, bo batchOptions) (*jobStages, error) {
	if _, err := stages.ParseEmojiPolicy(o.Emoji); err != nil {
		return nil, usagef("--emoji: %v", err)
	}
	if o.APIKey == "" {
		return nil, usagef("no API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	j, err := o.compile(in, bo)
	if err != nil {
		return nil, err
	}
	b, err := buildJob(ctx, j, buildOptions{APIKey: o.APIKey, NeedPrice: o.Budget > 0 || o.BudgetTotal > 0, FlexTimeout: o.flexTimeout, FromFlags: true})
	if err != nil {
		return nil, err
	}
	if err := checkStorable(o.DB, b.stored); err != nil {
		return nil, err
	}
	b.stored.Flags = true
	agg := b.stages[2].Stage.(*stages.Aggregate)
	b.defs[0].Config = mustJSON(sanitizeSettings{MaxChars: o.MaxChars, Emoji: o.Emoji})
	b.defs[1].Config = mustJSON(classifySettings{Model: o.Model, Labels: o.Labels, PromptFile: o.PromptFile, Prompt: o.prompt, MaxOutputTokens: o.MaxOutputTokens})
	b.defs[2].Config, b.defs[2].Reads = mustJSON(agg), aggregateReads(agg)
	return b, nil
}

// checkStorable refuses the job the flags compiled to (st) when the job
// file's decoder would refuse it: what a run stores must read back (plan
// --db, job show | run -f), so the job file's rules hold for the flags
// too, even where no flag's own check says so.
func checkStorable(db string, st job.Stored) error {
	if _, err := job.Decode(db+" (the job the flags define)", []byte(st.YAML)); err != nil {
		return usagef("%v\nthe flags define a job a job file could not hold: change the flags these keys come from", err)
	}
	return nil
}

// given is a --price-in/--price-out value, nil when the flag was left at
// its "list price" default (-1).
func given(perM float64) *float64 {
	if perM < 0 {
		return nil
	}
	return &perM
}

// classifyReads is what an edit must touch to re-run classify: the text
// (its fallback when sanitize left none), and every field when a custom
// prompt template may print fields.
func classifyReads(prompt string) []string {
	if strings.Contains(prompt, "Fields") || strings.Contains(strings.ReplaceAll(prompt, " ", ""), "{{.}}") {
		return nil // may read any field
	}
	return []string{pipeline.TextField}
}

// aggregateReads lists the record fields the aggregate stage reads, so an
// edit to one of them re-runs only the aggregate.
func aggregateReads(a *stages.Aggregate) []string {
	groupBy := a.GroupBy
	if groupBy == nil {
		groupBy = stages.DefaultGroupBy
	}
	reads := append([]string{}, groupBy...)
	reads = append(reads, stages.MonthGroup, cmp.Or(a.DateField, stages.DefaultDateField), cmp.Or(a.RatingField, stages.DefaultRatingField))
	return reads
}

// validate refuses option values no stage or limiter can work with,
// naming the flag (checkNumbers has refused the floats and NaNs before).
func (o *pipelineOptions) validate() error {
	checks := []struct {
		bad  bool
		flag string
		want string
	}{
		{o.MaxChars <= 0, "max-chars", "a positive number of characters"},
		{o.Timeout <= 0, "timeout", "a positive duration, e.g. 60s"},
		{o.MaxOutputTokens <= 0, "max-output-tokens", "a positive number of tokens"},
		{o.Workers <= 0, "workers", "at least 1"},
		{o.MaxAttempts <= 0, "max-attempts", "at least 1"},
		{o.Grace < 0, "grace", "a duration of 0 or more"},
		{o.Floor <= 0, "floor", "at least 1"},
		{o.Ceiling < 0 || o.Ceiling > 0 && o.Ceiling < o.Floor, "ceiling", fmt.Sprintf("at least --floor (%d), or 0 for the default", o.Floor)},
		{o.Start < 0, "start", "a number of calls, or 0 for the learned limit"},
		{o.Fixed < 0, "fixed", "a number of calls, or 0 for adaptive"},
		{o.Cooldown < 0, "cooldown", "a duration of 0 or more"},
		{o.MaxWait <= 0, "max-wait", "a positive duration"},
		{o.MaxOutage <= 0, "max-outage", "a positive duration"},
		{o.MaxRefused < 0, "max-refused", "a duration, or 0 to never stop for refusals"},
		{o.TPM < 0, "tpm", "a number of tokens per minute, or 0 for unknown"},
		{o.RPM < 0, "rpm", "a number of requests per minute, or 0 for unknown"},
	}
	for _, c := range checks {
		if c.bad {
			return usagef("--%s: want %s", c.flag, c.want)
		}
	}
	if err := stages.CheckTier(o.Tier, o.FlexDeadline); err != nil {
		flag := "--tier"
		if o.FlexDeadline != 0 {
			flag += "/--flex-deadline"
		}
		return usagef("%s: %v", flag, err)
	}
	return o.checkFleet()
}

// unwrapPath drops the *fs.PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openDB opens the pipeline DB with this definition: for writing, or
// read-only for a dry run.
func (o *pipelineOptions) openDB(b *jobStages) (pipeline.Database, error) {
	return openDatabase(o.DB, dbOpen{Stages: b.defs, MustExist: o.MustExist, ReadOnly: o.DryRun}, func() (*store.DB, error) {
		return store.Open(o.DB, store.Options{Stages: b.defs, MustExist: o.MustExist, ReadOnly: o.DryRun})
	})
}

// limiterCeiling is the ceiling an adaptive limiter of the API stage
// asking tier gets: the one given; else, on flex (or auto),
// stages.FlexCeiling, as minutes-long calls need thousands in flight
// for a modest rate, on a fleet worker too; else, on PostgreSQL, a fleet
// worker's, as each worker's pool claims items and holds their leases
// whether its quota is shared or not; else 0, the limiter's own default.
func limiterCeiling(given int, db pipeline.Database, tier string) int {
	switch _, fleet := db.(pipeline.Claimer); {
	case given != 0:
		return given
	case tier == stages.TierFlex || tier == stages.TierAuto:
		return stages.FlexCeiling
	case fleet:
		return postgres.DefaultFleetCeiling
	}
	return 0
}

// learnedStore is what learnedState and saveLearnedState need of a
// database: the learned limits, kept by key.
type learnedStore interface {
	SetLearnedLimit(key string, n int) error
	LearnedLimit(key string) int
}

// rateKey is the key the rate a stage's quota showed is kept under,
// beside its learned limit (kept under the stage's name), in call starts
// per minute.
func rateKey(stage string) string { return pipeline.QuotaRateKey(stage) }

// pacedRateKey is where earlier versions kept the rate the limiter
// paced, whether the quota bounded it or the run's own demand did: not
// read, as the slowest night's pace would hold every night after it, and
// cleared when a run saves its state.
func pacedRateKey(stage string) string { return stage + ".rate_per_min" }

// learnedState is where the last run left the stage's limiter: its limit
// on calls in flight (0 if none was saved) and the rate the quota showed
// it, in call starts per second (0 if none: the quota never bounded it,
// or an older version saved the limit alone or the rate it paced). A
// rate without a limit is not used.
func learnedState(db learnedStore, stage string) (limit int, ratePerSecond float64) {
	limit = db.LearnedLimit(stage)
	if limit <= 0 {
		return 0, 0
	}
	return limit, float64(db.LearnedLimit(rateKey(stage))) / 60
}

// saveLearnedState keeps what the stage's limiter learned for the next
// run to start from: its limit and its rate (limiter.AIMD.Rate), rounded
// to whole calls per minute. A limiter the quota never bounded this run
// (or one that learns no rate) saves no rate: a rate found by an earlier
// run stays, and without one the next run climbs from the limit.
func saveLearnedState(db learnedStore, stage string, lim pipeline.Limiter) error {
	if err := db.SetLearnedLimit(stage, lim.Limit()); err != nil {
		return err
	}
	perMinute := 0
	if r, ok := lim.(interface{ Rate() float64 }); ok {
		perMinute = int(math.Round(r.Rate() * 60))
	}
	// A run that never met the quota (one given --start by hand, or a
	// night too small to reach it) is no evidence that the rate an
	// earlier run found has moved: that rate is kept, so the next run is
	// not let climb into a quota already found.
	if perMinute > 0 {
		if err := db.SetLearnedLimit(rateKey(stage), perMinute); err != nil {
			return err
		}
	}
	if db.LearnedLimit(pacedRateKey(stage)) != 0 {
		// An older version's paced rate: an older version reading it
		// back would be held to it.
		return db.SetLearnedLimit(pacedRateKey(stage), 0)
	}
	return nil
}

// classifyCost prices a usage of the classify stage.
func (b *jobStages) classifyCost(u pipeline.Usage) float64 {
	return b.prices["classify"].Cost(u)
}
