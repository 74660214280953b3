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

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
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
	if bo.Mode != "" {
		l.Batch = &job.Batch{Size: bo.Size, Deadline: durationKey(bo.Deadline), Poll: durationKey(bo.Poll)}
	}
	if in, out := given(o.PriceIn), given(o.PriceOut); in != nil || out != nil {
		l.Price = &job.Price{Input: in, Output: out}
	}
	j.Stages = []job.Stage{
		{Sanitize: &job.Sanitize{MaxChars: o.MaxChars, Emoji: o.Emoji}},
		{LLM: l},
		{Aggregate: &job.Aggregate{GroupBy: o.GroupBy, Date: o.DateField, Rating: o.RatingField}},
	}
	return j, nil
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

// keptKey is a flag whose value a later run from flags keeps from the
// job the database stored when the flag is not given: how each is read
// back from that job. The settings that decide answers (model, labels,
// prompt, max-output-tokens, the sanitize and aggregate settings) are
// kept from the stage definitions instead (keepStored), which databases
// run from flags have always recorded.
var keptKeys = []struct {
	flag  string
	apply func(o *pipelineOptions, in *inputOptions, bo *batchOptions, j *job.Job, l *job.LLM)
}{
	{"base-url", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		o.BaseURL = j.BaseURL
	}},
	{"workers", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		o.Workers = orInt(j.Workers, o.Workers)
	}},
	{"tier", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Tier = orStr(l.Tier, o.Tier)
	}},
	{"flex-deadline", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.FlexDeadline = job.Duration(l.FlexDeadline)
	}},
	{"timeout", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Timeout = orDuration(l.Timeout, o.Timeout)
	}},
	{"max-attempts", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.MaxAttempts = orInt(l.MaxAttempts, o.MaxAttempts)
	}},
	{"start", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Start = l.Limiter.Start
	}},
	{"floor", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Floor = orInt(l.Limiter.Floor, o.Floor)
	}},
	{"ceiling", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Ceiling = l.Limiter.Ceiling
	}},
	{"fixed", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Fixed = l.Limiter.Fixed
	}},
	{"decrease", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		if l.Limiter.Decrease > 0 {
			o.Decrease = l.Limiter.Decrease
		}
	}},
	{"cooldown", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.Cooldown = orDuration(l.Limiter.Cooldown, o.Cooldown)
	}},
	{"max-wait", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.MaxWait = orDuration(l.MaxWait, o.MaxWait)
	}},
	{"max-outage", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.MaxOutage = orDuration(l.MaxOutage, o.MaxOutage)
	}},
	{"max-refused", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		if l.MaxRefused != "" {
			o.MaxRefused = job.Duration(l.MaxRefused)
		}
	}},
	{"tpm", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.TPM = l.Limiter.TPM
	}},
	{"rpm", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		o.RPM = l.Limiter.RPM
	}},
	{"price-in", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		if l.Price != nil && l.Price.Input != nil {
			o.PriceIn = *l.Price.Input
		}
	}},
	{"price-out", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, _ *job.Job, l *job.LLM) {
		if l.Price != nil && l.Price.Output != nil {
			o.PriceOut = *l.Price.Output
		}
	}},
	{"mode", func(_ *pipelineOptions, _ *inputOptions, bo *batchOptions, _ *job.Job, l *job.LLM) {
		bo.Mode = orStr(l.Mode, bo.Mode)
	}},
	{"batch-size", func(_ *pipelineOptions, _ *inputOptions, bo *batchOptions, _ *job.Job, l *job.LLM) {
		if l.Batch != nil {
			bo.Size = orInt(l.Batch.Size, bo.Size)
		}
	}},
	{"batch-deadline", func(_ *pipelineOptions, _ *inputOptions, bo *batchOptions, _ *job.Job, l *job.LLM) {
		if l.Batch != nil {
			bo.Deadline = orDuration(l.Batch.Deadline, bo.Deadline)
		}
	}},
	{"batch-poll", func(_ *pipelineOptions, _ *inputOptions, bo *batchOptions, _ *job.Job, l *job.LLM) {
		if l.Batch != nil {
			bo.Poll = orDuration(l.Batch.Poll, bo.Poll)
		}
	}},
	{"lease", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		if j.Fleet != nil {
			o.Lease = orDuration(j.Fleet.Lease, o.Lease)
		}
	}},
	{"quota", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		if j.Fleet != nil {
			o.Quota = orStr(j.Fleet.Quota, o.Quota)
		}
	}},
	{"quota-key", func(o *pipelineOptions, _ *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		if j.Fleet != nil {
			o.QuotaKey = j.Fleet.QuotaKey
		}
	}},
	{"id-field", func(_ *pipelineOptions, in *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		in.IDField = orStr(j.Input.ID, in.IDField)
	}},
	{"text-field", func(_ *pipelineOptions, in *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		in.TextField = orStr(j.Input.Text, in.TextField)
	}},
	{"date-format", func(_ *pipelineOptions, in *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		in.DateFormat = j.Input.DateFormat
	}},
	{"rating-range", func(_ *pipelineOptions, in *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		in.RatingRange = orStr(j.Input.RatingRange, in.RatingRange)
	}},
	{"max-line-bytes", func(_ *pipelineOptions, in *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		in.MaxLine = orInt(j.Input.MaxLineBytes, in.MaxLine)
	}},
	{"max-field-lines", func(_ *pipelineOptions, in *inputOptions, _ *batchOptions, j *job.Job, _ *job.LLM) {
		in.MaxFieldLines = orInt(j.Input.MaxFieldLines, in.MaxFieldLines)
	}},
}

// keepStoredJob fills every setting of keptKeys whose flag was not given
// from j, the job a run from flags stored, and returns the flags it
// changed: `run --db F` resumes with the settings that started it. in
// and bo may be nil (retry and rerun ingest nothing and run online).
func (o *pipelineOptions) keepStoredJob(j *job.Job, in *inputOptions, bo *batchOptions) []string {
	var l *job.LLM
	for _, s := range j.Stages {
		if s.LLM != nil && s.LLM.Preset == job.PresetClassify {
			l = s.LLM
		}
	}
	if l == nil {
		return nil
	}
	if in == nil {
		in = &inputOptions{}
	}
	if bo == nil || bo.Mode == "" {
		bo = &batchOptions{} // retry, rerun: online, whatever the job says
	}
	var kept []string
	for _, k := range keptKeys {
		if o.set[k.flag] {
			continue
		}
		before := fmt.Sprint(*o, *in, *bo)
		k.apply(o, in, bo, j, l)
		if fmt.Sprint(*o, *in, *bo) != before {
			kept = append(kept, k.flag)
		}
	}
	return kept
}

// orDuration is s parsed, or def when s is "".
func orDuration(s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	return job.Duration(s)
}

// saveJob records in db the job the run ran, whatever defined it, so
// that `job show` prints it, `run -f` accepts what it prints and `run
// --db` with no flags resumes it. A job compiled from flags that differs
// from the one an earlier run from flags stored (settings that change no
// stage's answers: a change that does was refused or re-run before this)
// is said, key by key, as settleChanges says a job file's; tonight's
// input file is not a change.
func saveJob(db pipeline.Database, b *jobStages, stderr io.Writer) error {
	jdb, ok := db.(jobDatabase)
	if !ok {
		return nil
	}
	st := b.stored.WithDir(b.job.Dir)
	if raw, err := jdb.Job(); err == nil && raw != nil && st.Flags {
		if old, err := job.UnmarshalStored(raw); err == nil && old.Flags {
			diff, _ := job.Diff(old, st)
			diff = slices.DeleteFunc(diff, func(c job.Change) bool { return c.Stage == "" && c.Key == "input.path" })
			if len(diff) > 0 {
				fmt.Fprintf(stderr, "the run's settings changed since the last run:\n  %s\n", joinChanges(diff))
			}
		}
	}
	return jdb.SaveJob(st.Marshal())
}
