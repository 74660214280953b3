// This file compiles a run's flags into the job they define: the same
// job.Job a job file decodes into, so one builder and one drain serve
// both, and the database stores what started it either way.

package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// compile is the job the flags define: the built-in pipeline (sanitize,
// the classify preset, aggregate) with every setting the flags give, the
// input in (when in.Path is set) and the batch options bo. The classify
// prompt is its text (read from --prompt-file, or kept from the
// database), so the stored job asks what this run asked even after the
// file changes. Paths are absolute, so the job runs from any directory.
func (o *pipelineOptions) compile(in inputOptions, bo batchOptions) (*job.Job, error) {
	if o.PromptFile != "" && !o.promptKept {
		b, err := os.ReadFile(o.PromptFile)
		if err != nil {
			return nil, usagef("--prompt-file %s: %v", o.PromptFile, unwrapPath(err))
		}
		o.prompt = string(b)
	}
	j := &job.Job{
		DB:      o.DB,
		BaseURL: o.BaseURL,
		Workers: o.Workers,
		Fleet:   &job.Fleet{Lease: durationKey(o.Lease), Quota: o.Quota, QuotaKey: o.QuotaKey},
		Input: job.Input{Path: absPath(in.Path), Format: in.Format, ID: in.IDField, Text: in.TextField,
			MaxLineBytes: in.MaxLine, MaxFieldLines: in.MaxFieldLines, DateFormat: in.DateFormat, RatingRange: in.RatingRange},
	}
	if in.Path == "" && o.storedInput.Path != "" {
		j.Input.Path, j.Input.Format = o.storedInput.Path, o.storedInput.Format
	}
	if isPostgres(o.DB) {
		j.DB = postgres.Redact(o.DB) // the stored job is printed: no password in it
	} else {
		j.DB = absPath(o.DB)
	}
	if wd, err := os.Getwd(); err == nil {
		j.Dir = wd
	}
	l := &job.LLM{
		Name: "classify", Preset: job.PresetClassify, Model: o.Model, Prompt: o.prompt,
		Output: job.Output{Label: o.Labels}, MaxOutputTokens: o.MaxOutputTokens, MaxAttempts: o.MaxAttempts,
		Tier: o.Tier, FlexDeadline: durationKey(o.FlexDeadline), Timeout: durationKey(o.Timeout),
		MaxWait: durationKey(o.MaxWait), MaxOutage: durationKey(o.MaxOutage), MaxRefused: o.MaxRefused.String(),
		Limiter: job.Limiter{Start: o.Start, Floor: o.Floor, Ceiling: o.Ceiling, Fixed: o.Fixed, Decrease: o.Decrease,
			Cooldown: durationKey(o.Cooldown), TPM: o.TPM, RPM: o.RPM},
		Mode: bo.Mode,
	}
	if m, err := batch.ParseMode(bo.Mode); err == nil {
		l.Mode = string(m) // as the job file writes it: --mode Batch is batch
	}
	if bo.Mode != "" {
		l.Batch = &job.Batch{Size: bo.Size, Deadline: durationKey(bo.Deadline), Poll: durationKey(bo.Poll),
			InlineBytes: bo.InlineBytes, CreateSettle: durationKey(bo.Settle), MaxSends: bo.MaxSends}
	} else if o.storedMode != "" {
		// retry and rerun run online, but store the mode later runs use
		l.Mode = o.storedMode
		if b := o.storedBatch; b != nil {
			c := *b
			l.Batch = &c
		}
	}
	if err := job.CheckTierMode(l.Tier, l.Mode); err != nil {
		if bo.Mode != "" {
			return nil, usagef("--tier %s with --mode %s: %v: leave --tier out, or use --mode auto (batch jobs, then online calls at the tier)", l.Tier, l.Mode, err)
		}
		return nil, usagef("--tier %s: %v, and the job %s stored runs classify in batch mode: leave --tier out (this command's own calls are online), or change the mode with run --mode", l.Tier, err, o.DB)
	}
	if in, out := given(o.PriceIn), given(o.PriceOut); in != nil || out != nil {
		l.Price = &job.Price{Input: in, Output: out}
	}
	j.Stages = []job.Stage{
		{Sanitize: &job.Sanitize{MaxChars: o.MaxChars, Emoji: o.Emoji}},
		{LLM: l},
		{Aggregate: &job.Aggregate{GroupBy: o.GroupBy, Date: o.DateField, Rating: o.RatingField}},
	}
	dropDefaults(j, l)
	return j, nil
}

// dropDefaults leaves out of the compiled job the run settings a flag
// left at a default the job's own is equal to, so `job show` prints what
// the run chose. What decides answers (model, labels, prompt, the
// sanitize and aggregate settings) stays written out, and so does the
// limiter's decrease (the fleet's limiter has its own default).
func dropDefaults(j *job.Job, l *job.LLM) {
	in := &j.Input
	in.ID, in.Text = unless(in.ID, "id"), unless(in.Text, "text")
	in.MaxLineBytes, in.MaxFieldLines = unless(in.MaxLineBytes, ingest.DefaultMaxLineBytes), unless(in.MaxFieldLines, ingest.DefaultMaxFieldLines)
	in.RatingRange = unless(in.RatingRange, ingest.DefaultRatingRange)
	j.Workers = unless(j.Workers, pipeline.DefaultWorkers)
	f := j.Fleet
	f.Lease, f.Quota = unless(f.Lease, durationKey(pipeline.DefaultLease)), unless(f.Quota, quotaShared)
	if *f == (job.Fleet{}) {
		j.Fleet = nil
	}
	l.Tier, l.MaxAttempts = unless(l.Tier, stages.TierStandard), unless(l.MaxAttempts, pipeline.DefaultMaxAttempts)
	l.Timeout = unless(l.Timeout, durationKey(stages.DefaultTimeout))
	l.MaxWait, l.MaxOutage = unless(l.MaxWait, durationKey(pipeline.DefaultMaxWait)), unless(l.MaxOutage, durationKey(pipeline.DefaultMaxOutage))
	l.MaxRefused = unless(l.MaxRefused, pipeline.DefaultMaxRefused.String())
	l.Limiter.Floor, l.Limiter.Cooldown = unless(l.Limiter.Floor, limiter.DefaultFloor), unless(l.Limiter.Cooldown, durationKey(limiter.DefaultCooldown))
	l.Mode = unless(l.Mode, string(batch.ModeOnline))
	if b := l.Batch; b != nil {
		b.Size = unless(b.Size, batch.DefaultSize)
		b.Deadline, b.Poll = unless(b.Deadline, durationKey(batch.DefaultDeadline)), unless(b.Poll, durationKey(batch.DefaultPoll))
		b.InlineBytes, b.MaxSends = unless(b.InlineBytes, batch.DefaultInlineBytes), unless(b.MaxSends, batch.DefaultMaxSends)
		b.CreateSettle = unless(b.CreateSettle, durationKey(batch.DefaultCreateSettle))
		if *b == (job.Batch{}) {
			l.Batch = nil
		}
	}
}

// unless is v, or the zero value (the job's default) when v is def.
func unless[T comparable](v, def T) T {
	var zero T
	if v == def {
		return zero
	}
	return v
}

// durationKey is d as a job's duration key: "" for 0 (the default).
func durationKey(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// absPath is p made absolute ("" stays "").
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// keepStoredJob fills every setting whose flag was not given from j, the
// job a run from flags stored, and returns the flags it changed: `run
// --db F` resumes with the settings that started it. The settings that
// decide answers (model, labels, prompt, max-output-tokens, the sanitize
// and aggregate settings) are kept from the stage definitions instead
// (keepStored), which databases run from flags have always recorded. bo
// with no mode is retry's and rerun's: they run online whatever the job
// says, and keep its mode and batch settings only for the job they store.
//
// A --model other than the stored one drops, and returns in dropped, the
// stored settings that were the old model's: its custom price (the plan
// and the budget would price the new model at it), its quota (tpm, rpm)
// and its shared-quota row (quota-key). The new model's list price and
// the defaults apply to those instead.
func (o *pipelineOptions) keepStoredJob(j *job.Job, in *inputOptions, bo *batchOptions) (kept, dropped []string) {
	l := classifyOf(j)
	if l == nil {
		return nil, nil
	}
	k := &keeper{set: o.set, newModel: o.set["model"] && l.Model != "" && o.Model != l.Model}
	o.keepCalls(k, j, l)
	if in != nil {
		if in.Path == "" {
			o.storedInput = job.Input{Path: j.Input.Path, Format: j.Input.Format}
		}
		keepInput(k, j.Input, in)
	}
	switch {
	case bo != nil && bo.Mode != "":
		keepBatch(k, l, bo)
	case bo != nil:
		o.storedMode, o.storedBatch = l.Mode, l.Batch
	}
	return k.kept, k.dropped
}

// keeper keeps stored settings whose flag was not given (keepStoredJob),
// noting each flag it kept or dropped.
type keeper struct {
	set map[string]bool
	// newModel: --model names another model than the stored one.
	newModel      bool
	kept, dropped []string
}

// keep applies a stored value of flag unless the flag was given, the job
// holds none (stored: a zero or "" is the default, which the flag
// already has) or it equals the flag's.
func (k *keeper) keep(flag string, stored, differs bool, apply func()) {
	switch {
	case k.set[flag] || !stored || !differs:
	case k.newModel && modelBound[flag]:
		k.dropped = append(k.dropped, flag)
	default:
		apply()
		k.kept = append(k.kept, flag)
	}
}

func (k *keeper) str(flag string, dst *string, v string) {
	k.keep(flag, v != "", v != *dst, func() { *dst = v })
}

func (k *keeper) num(flag string, dst *int, v int) {
	k.keep(flag, v != 0, v != *dst, func() { *dst = v })
}

func (k *keeper) dur(flag string, dst *time.Duration, v string) {
	k.keep(flag, v != "", job.Duration(v) != *dst, func() { *dst = job.Duration(v) })
}

func (k *keeper) price(flag string, dst *float64, v *float64) {
	k.keep(flag, v != nil, v != nil && *v != *dst, func() { *dst = *v })
}

// keepCalls keeps how the stored run called the API: its endpoint,
// workers, tier, timeouts, limiter, price and fleet.
func (o *pipelineOptions) keepCalls(k *keeper, j *job.Job, l *job.LLM) {
	k.str("base-url", &o.BaseURL, j.BaseURL)
	k.num("workers", &o.Workers, j.Workers)
	k.str("tier", &o.Tier, l.Tier)
	k.dur("flex-deadline", &o.FlexDeadline, l.FlexDeadline)
	k.dur("timeout", &o.Timeout, l.Timeout)
	k.num("max-attempts", &o.MaxAttempts, l.MaxAttempts)
	k.dur("max-wait", &o.MaxWait, l.MaxWait)
	k.dur("max-outage", &o.MaxOutage, l.MaxOutage)
	k.dur("max-refused", &o.MaxRefused, l.MaxRefused)
	// --start is not kept: it is one run's hint, and a kept one would
	// stop every later run from starting at the limit it learned.
	lc := l.Limiter
	k.num("floor", &o.Floor, lc.Floor)
	k.num("ceiling", &o.Ceiling, lc.Ceiling)
	k.num("fixed", &o.Fixed, lc.Fixed)
	k.keep("decrease", lc.Decrease != 0, lc.Decrease != o.Decrease, func() { o.Decrease = lc.Decrease })
	k.dur("cooldown", &o.Cooldown, lc.Cooldown)
	k.num("tpm", &o.TPM, lc.TPM)
	k.num("rpm", &o.RPM, lc.RPM)
	if p := l.Price; p != nil {
		k.price("price-in", &o.PriceIn, p.Input)
		k.price("price-out", &o.PriceOut, p.Output)
	}
	if f := j.Fleet; f != nil {
		k.dur("lease", &o.Lease, f.Lease)
		k.str("quota", &o.Quota, f.Quota)
		k.str("quota-key", &o.QuotaKey, f.QuotaKey)
	}
}

// keepInput keeps how the stored run read its input.
func keepInput(k *keeper, stored job.Input, in *inputOptions) {
	k.str("id-field", &in.IDField, stored.ID)
	k.str("text-field", &in.TextField, stored.Text)
	k.str("date-format", &in.DateFormat, stored.DateFormat)
	k.str("rating-range", &in.RatingRange, stored.RatingRange)
	k.num("max-line-bytes", &in.MaxLine, stored.MaxLineBytes)
	k.num("max-field-lines", &in.MaxFieldLines, stored.MaxFieldLines)
}

// keepBatch keeps the stored run's mode and batch settings.
func keepBatch(k *keeper, l *job.LLM, bo *batchOptions) {
	k.str("mode", &bo.Mode, l.Mode)
	if b := l.Batch; b != nil {
		k.num("batch-size", &bo.Size, b.Size)
		k.dur("batch-deadline", &bo.Deadline, b.Deadline)
		k.dur("batch-poll", &bo.Poll, b.Poll)
		k.num("batch-inline-bytes", &bo.InlineBytes, b.InlineBytes)
		k.dur("batch-create-settle", &bo.Settle, b.CreateSettle)
		k.num("batch-max-sends", &bo.MaxSends, b.MaxSends)
	}
}

// classifyOf is j's classify preset stage, nil when it has none.
func classifyOf(j *job.Job) *job.LLM {
	for _, s := range j.Stages {
		if s.LLM != nil && s.LLM.Preset == job.PresetClassify {
			return s.LLM
		}
	}
	return nil
}

// modelBound are the flags whose stored values were set for the stored
// model, not kept for another one.
var modelBound = map[string]bool{"price-in": true, "price-out": true, "tpm": true, "rpm": true, "quota-key": true}

// orDuration is s parsed, or def when s is "".
func orDuration(s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	return job.Duration(s)
}

// storeJob records in db the job the run runs, whatever defined it, so
// that `job show` prints it, `run -f` accepts what it prints and `run
// --db` with no flags resumes it; and forgets the limits learned for the
// stages' old models (see noteNewModels).
func storeJob(db pipeline.Database, b *jobStages) error {
	jdb, ok := db.(jobDatabase)
	if !ok {
		return nil
	}
	if err := jdb.SaveJob(b.stored.WithDir(b.job.Dir).Marshal()); err != nil {
		return err
	}
	return b.clearLearned(db)
}

// sayJobChanges says, key by key as settleChanges says a job file's, how
// a job compiled from flags differs from the one an earlier run from
// flags stored (settings that change no stage's answers: a change that
// does was refused or re-run before this); tonight's input file is not a
// change.
func sayJobChanges(db pipeline.Database, b *jobStages, stderr io.Writer) {
	jdb, ok := db.(jobDatabase)
	if !ok || !b.stored.Flags {
		return
	}
	raw, err := jdb.Job()
	if err != nil || raw == nil {
		return
	}
	old, err := job.UnmarshalStored(raw)
	if err != nil || !old.Flags {
		return
	}
	diff, _ := job.Diff(old, b.stored.WithDir(b.job.Dir))
	diff = slices.DeleteFunc(diff, func(c job.Change) bool { return c.Stage == "" && c.Key == "input.path" })
	if len(diff) > 0 {
		fmt.Fprintf(stderr, "the run's settings changed since the last run:\n  %s\n", joinChanges(diff))
	}
}
