// This file builds a job's pipeline: the job to run (a file, or the one
// a database recorded), its stages and limiters, its input, and which
// run flags still apply to a job.

package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

// jobStages is a job's pipeline: its stored definition, the engine's
// stage configs (limiters added once the DB is open) and each LLM
// stage's prices.
type jobStages struct {
	job    *job.Job
	stored job.Stored
	defs   []store.StageDef
	stages []pipeline.StageConfig
	// llm maps each LLM stage's name to its job configuration.
	llm      map[string]*job.LLM
	limiters map[string]pipeline.Limiter
	prices   map[string]pipeline.Price
}

// loadJob reads the job to run: the file -f names, else the job the
// database at db recorded (a resume). db, when given, overrides the
// job's. Nil without either.
func loadJob(file, db string) (*job.Job, error) {
	if file != "" {
		j, err := job.Load(file)
		if err != nil {
			return nil, usage(err)
		}
		if db != "" {
			j.DB = db // the command line's, relative to the working directory
		} else if !filepath.IsAbs(j.DB) && !isPostgres(j.DB) {
			j.DB = filepath.Join(j.Dir, j.DB)
		}
		return j, nil
	}
	if db == "" {
		return nil, nil
	}
	raw, err := readStoredJob(db)
	if err != nil || raw == nil {
		return nil, err
	}
	st, err := job.UnmarshalStored(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: the stored job is damaged (%v): run with -f JOB.yaml", db, err)
	}
	j, err := st.Job(db)
	if err != nil {
		return nil, err
	}
	// The stored job names its files relative to the job file's
	// directory, which the stored YAML does not carry: it was recorded
	// with the job, so use it.
	j.Dir, j.DB = st.Dir, db
	return j, nil
}

// buildJob constructs every stage of j; it sends no request and writes
// nothing.
func buildJob(ctx context.Context, j *job.Job, apiKey string) (*jobStages, error) {
	stored, err := j.Snapshot()
	if err != nil {
		return nil, usage(err)
	}
	b := &jobStages{job: j, stored: stored, llm: map[string]*job.LLM{}, limiters: map[string]pipeline.Limiter{}, prices: map[string]pipeline.Price{}}
	// Each stage's fingerprint is the stage's own (what decides its
	// answers, as the flags' pipeline computes it), so a job equivalent
	// to a run from flags resumes its database without re-running.
	b.defs = j.StageDefs(stored.Files)
	outputs := j.OutputFields()
	var earlier []string
	for i, s := range j.Stages {
		at := fmt.Sprintf("%s: stages[%d] (%s)", j.File, i, s.Name())
		var sc pipeline.StageConfig
		switch {
		case s.Sanitize != nil:
			emoji, err := stages.ParseEmojiPolicy(s.Sanitize.Emoji)
			if err != nil {
				return nil, usagef("%s: %v", at, err)
			}
			maxChars := orInt(s.Sanitize.MaxChars, stages.DefaultMaxChars)
			sc = pipeline.StageConfig{Stage: &stages.Sanitize{MaxChars: maxChars, Emoji: emoji}, Workers: pipeline.DefaultWorkers, MaxAttempts: 1}
			b.defs[i].Fingerprint = fingerprint(maxChars, emoji) // as the flags' sanitize
		case s.LLM != nil:
			l := s.LLM
			if l.Mode == job.ModeBatch {
				return nil, errBatchOnlyFromFlags(at + ": mode: batch")
			}
			cfg := stages.LLMConfig{
				Name: l.Name, Model: l.Model, Labels: l.Output.Label, When: l.When, Earlier: earlier,
				MaxOutputTokens: l.MaxOutputTokens, PromptTemplate: l.Prompt, SystemInstruction: l.System,
				Endpoint:       stages.Endpoint{Backend: j.Backend, APIKey: apiKey, BaseURL: j.BaseURL, Project: j.Project, Location: j.Location},
				EarlierOutputs: map[string][]string{},
				Tier:           stages.TierConfig{Tier: l.Tier, FlexDeadline: l.Deadline()},
			}
			for _, e := range earlier {
				if f, ok := outputs[e]; ok {
					cfg.EarlierOutputs[e] = f
				}
			}
			for _, f := range []struct {
				name string
				into *string
			}{{l.PromptFile, &cfg.PromptTemplate}, {l.SystemFile, &cfg.SystemInstruction}} {
				if f.name != "" {
					data, err := j.ReadFile(f.name)
					if err != nil {
						return nil, usagef("%s: %v", at, err)
					}
					*f.into = string(data)
				}
			}
			if l.Output.SchemaFile != "" {
				if cfg.Schema, err = j.ReadFile(l.Output.SchemaFile); err != nil {
					return nil, usagef("%s: %v", at, err)
				}
			}
			st, err := stages.NewLLM(ctx, cfg)
			if err != nil {
				return nil, usagef("%s: %v", j.File, err)
			}
			b.llm[l.Name] = l
			b.defs[i].Fingerprint = st.Fingerprint()
			// The list price with its cached-input rate and tier factors,
			// as a run from flags prices it: a flex call at half, a
			// priority one above, cached input at its own rate.
			price, err := stages.StagePrice(stages.PriceConfig{Model: st.Model()}, false)
			if err != nil {
				return nil, usagef("%s: %v", at, err)
			}
			b.prices[l.Name] = price
			// Workers: as many as the limiter addLimiters gives it can
			// ever let be in flight (pipeline.PoolSizer).
			sc = pipeline.StageConfig{Stage: st, MaxAttempts: l.MaxAttempts, Price: b.prices[l.Name]}
		case s.Aggregate != nil:
			a := s.Aggregate
			agg := &stages.Aggregate{GroupBy: a.GroupBy, DateField: a.Date, RatingField: a.Rating, Count: a.Count}
			sc = pipeline.StageConfig{Stage: agg, Workers: pipeline.DefaultWorkers, MaxAttempts: 1}
			groupBy := a.GroupBy
			if groupBy == nil {
				groupBy = stages.DefaultGroupBy
			}
			parts := []any{strings.Join(groupBy, ","), orStr(a.Date, stages.DefaultDateField), orStr(a.Rating, stages.DefaultRatingField)}
			if a.Count != "" && a.Count != "classify.label" {
				parts = append(parts, a.Count)
			}
			b.defs[i].Fingerprint = fingerprint(parts...) // as the flags' aggregate when it counts classify.label
		}
		b.stages = append(b.stages, sc)
		earlier = append(earlier, s.Name())
	}
	return b, nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// addLimiters gives each LLM stage its own limiter, starting from the
// limit that stage learned in earlier runs (Gemini quotas are per model).
// In a PostgreSQL pipeline it is the fleet's limiter of the stage's
// model (quota key gemini/MODEL), shared with every worker, as a flag
// run's classify is.
func (b *jobStages) addLimiters(ctx context.Context, db pipeline.Database, log *slog.Logger) error {
	pg, fleet := db.(*postgres.DB)
	for i, sc := range b.stages {
		l := b.llm[sc.Stage.Name()]
		if l == nil {
			continue
		}
		start, startRate := l.Limiter.Start, 0.0
		if start == 0 {
			start, startRate = learnedState(db, l.Name)
		}
		var lim pipeline.Limiter = limiter.New(limiter.Config{Start: start, StartRate: startRate, Floor: l.Limiter.Floor, Ceiling: limiterCeiling(l.Limiter.Ceiling, db, l.Tier)})
		if m, ok := sc.Stage.(interface{ Model() string }); ok && fleet {
			fl, err := postgres.NewFleetLimiter(ctx, postgres.NewSharedQuota(pg), postgres.FleetLimitConfig{
				Key: "gemini/" + m.Model(), Start: start, Floor: l.Limiter.Floor, Ceiling: l.Limiter.Ceiling, Log: log,
			})
			if err != nil {
				return err
			}
			lim = fl
		}
		b.limiters[l.Name] = lim
		b.stages[i].Limiter = lim
	}
	return nil
}

// checkPriced refuses a budget the run could not keep: an LLM stage whose
// model the price table does not know is priced at zero, and the runner
// would never stop its calls for the budget.
func (b *jobStages) checkPriced() error {
	for _, sc := range b.stages {
		st, ok := sc.Stage.(*stages.LLM)
		if !ok {
			continue
		}
		if name, model := st.Name(), st.Model(); b.prices[name].IsZero() {
			return usagef("%s: stage %s: model %s is not in the price table (%s, as of %s), so a budget cannot be kept: run it without --budget/--budget-total, or on a listed model",
				b.job.File, name, model, stages.PriceSource, stages.PricesAsOf)
		}
	}
	return nil
}

// cost prices one stage's usage (zero for a stage that calls nothing).
func (b *jobStages) cost(stage string, u pipeline.Usage) float64 { return b.prices[stage].Cost(u) }

// checkJobInput checks the job's input file (relative to the job file)
// with the aggregate's fields, as --input is checked.
func checkJobInput(ctx context.Context, j *job.Job, stderr io.Writer) (*ingest.Plan, error) {
	in := inputOptions{Path: j.Input.Path, Format: j.Input.Format, IDField: orStr(j.Input.ID, "id"), TextField: orStr(j.Input.Text, "text"),
		MaxLine: ingest.DefaultMaxLineBytes, MaxFieldLines: ingest.DefaultMaxFieldLines, RatingRange: ingest.DefaultRatingRange}
	in.Path = jobInputPath(j)
	in.Names = ingest.Names{Format: "input.format", IDField: "input.id", TextField: "input.text",
		GroupBy: "aggregate.group_by", DateField: "aggregate.date", RatingField: "aggregate.rating"}
	o := &pipelineOptions{}
	for _, s := range j.Stages {
		if a := s.Aggregate; a != nil {
			o.GroupBy, o.DateField, o.RatingField = a.GroupBy, orStr(a.Date, "date"), orStr(a.Rating, "rating")
			if o.GroupBy == nil {
				o.GroupBy = stages.DefaultGroupBy
			}
		}
	}
	return checkInput(ctx, o, &in, stderr)
}

// jobInputPath is the job's input file, relative paths read from the
// job file's directory.
func jobInputPath(j *job.Job) string {
	if filepath.IsAbs(j.Input.Path) {
		return j.Input.Path
	}
	return filepath.Join(j.Dir, j.Input.Path)
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// jobFileFlag is run's -f.
func jobFileFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "file", Aliases: []string{"f"}, Category: catDB, Usage: "job `FILE` (YAML: db, input, stages; see `sawtooth init`); without it, `run --db F` resumes the job F recorded", Destination: dest}
}

// jobRunFlags are the run flags that still apply to a job: where it runs,
// tonight's input file, how it is watched, and whether a changed stage
// may be re-run.
var jobRunFlags = map[string]bool{
	"db": true, "file": true, "input": true, "base-url": true, "stage": true, "no-cache": true, "budget": true, "budget-total": true, "from-stage": true, "dry-run": true, "yes": true, "confirm-above": true, "rerun-changed": true, "json": true, "quiet": true, "grace": true,
	"log-format": true, "log-level": true, "metrics-addr": true, "config": true,
}

// applyJobFlags applies to j the run flags that override a job's
// settings: --base-url (or GOOGLE_GEMINI_BASE_URL) in place of its
// base_url, as for a run from flags, so a job can be pointed at a
// simulator or a proxy without editing it. An empty value (a variable
// set to "") overrides nothing.
func applyJobFlags(c *cli.Context, j *job.Job) {
	if u := c.String("base-url"); c.IsSet("base-url") && u != "" {
		j.BaseURL = u
	}
}

// checkJobFlags refuses the stage and input flags with a job: the job
// file says those, and two sources for one setting is a trap.
func checkJobFlags(c *cli.Context) error {
	var bad []string
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if c.IsSet(name) && !jobRunFlags[name] {
			if ef, ok := f.(interface{ GetEnvVars() []string }); ok && envSet(ef.GetEnvVars()) && !flagOnCommandLine(name) {
				continue // a SAWTOOTH_* default for flag runs: not this job's
			}
			bad = append(bad, "--"+name)
		}
	}
	if asksForBatch(c, bad) {
		return errBatchOnlyFromFlags(strings.Join(bad, ", "))
	}
	if len(bad) > 0 {
		return usagef("%s: set in the job file instead (a job file holds the stages and the input; the flags are for one-off runs without one)", strings.Join(bad, ", "))
	}
	return nil
}

func envSet(names []string) bool {
	for _, n := range names {
		if _, ok := os.LookupEnv(n); ok {
			return true
		}
	}
	return false
}

// flagOnCommandLine reports whether --name (or -name) is among the
// process's arguments.
func flagOnCommandLine(name string) bool {
	for _, a := range os.Args[1:] {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}
