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
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

// jobStages is a job's pipeline, whatever defined it (a job file, the
// job a database stored, or the flags compiled by compile): its stored
// definition, the engine's stage configs (limiters added once the DB is
// open) and each LLM stage's prices.
type jobStages struct {
	job    *job.Job
	stored job.Stored
	defs   []store.StageDef
	stages []pipeline.StageConfig
	// llm maps each LLM stage's name to its job configuration.
	llm      map[string]*job.LLM
	limiters map[string]pipeline.Limiter
	prices   map[string]pipeline.Price
	// classify is the classify preset's stage (nil: the job has none).
	classify *stages.Classify
	// batched are the LLM stages whose mode is batch or auto, in the
	// job's order: each has batch jobs of its own (see drainBatch).
	batched []batchedStage
	// fromFlags says the flags compiled the job: the batch settings no
	// job key holds come from them.
	fromFlags bool
	// newModel names the LLM stages whose model differs from the stored
	// job's (see noteNewModels): the limit they learned was another
	// model's.
	newModel map[string]string
}

// loadJob reads the job to run: the file -f names, else the job the
// database at db recorded (a resume). db, when given, overrides the
// job's. Nil without either.
func loadJob(file, db string) (*job.Job, error) {
	if file != "" {
		j, err := job.Load(file)
		if err != nil {
			return nil, usage(wordJobFile(err))
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
	st, err := loadStored(db)
	if err != nil || st == nil || st.Flags {
		return nil, err // a job compiled from flags resumes through the flags: see runOptions
	}
	return storedJobOf(db, st)
}

// loadStored reads the job the database at db recorded; nil when it
// records none.
func loadStored(db string) (*job.Stored, error) {
	raw, err := readStoredJob(db)
	if err != nil || raw == nil {
		return nil, err
	}
	st, err := job.UnmarshalStored(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: the stored job is damaged (%v): run with -f JOB.yaml", db, err)
	}
	return &st, nil
}

// storedJobOf decodes st, the job db recorded, to run it in db.
func storedJobOf(db string, st *job.Stored) (*job.Job, error) {
	j, err := st.Job(db)
	if err != nil {
		return nil, err
	}
	// The stored job names its files relative to the job file's
	// directory, which the stored YAML does not carry: it was recorded
	// with the job, so use it.
	j.Dir = st.Dir
	if j.DB != absPath(db) {
		j.DB = db // a job compiled from flags wrote the same file absolute
	}
	return j, nil
}

// buildOptions are what building a job's stages needs beyond the job.
type buildOptions struct {
	APIKey string
	// NeedPrice refuses a model the price table does not know (a budget
	// is asked for); a job file's run says so itself (checkPriced).
	NeedPrice bool
	// FlexTimeout bounds one flex call (0: the stage's default; the demo
	// shortens it).
	FlexTimeout time.Duration
	// FromFlags says the flags compiled the job: messages name flags,
	// not a job file's keys.
	FromFlags bool
}

// buildJob constructs every stage of j; it sends no request and writes
// nothing. It is the one builder: a job file, a stored job and the job
// the flags compile to all go through it.
func buildJob(ctx context.Context, j *job.Job, bo buildOptions) (*jobStages, error) {
	stored, err := j.Snapshot()
	if err != nil {
		return nil, usage(err)
	}
	b := &jobStages{job: j, stored: stored, llm: map[string]*job.LLM{}, limiters: map[string]pipeline.Limiter{}, prices: map[string]pipeline.Price{},
		fromFlags: bo.FromFlags}
	// Each stage's fingerprint is the stage's own (what decides its
	// answers), so a job file equivalent to a run from flags resumes its
	// database without re-running.
	b.defs = j.StageDefs(stored.Files)
	workers := orInt(j.Workers, pipeline.DefaultWorkers)
	var earlier []string
	for i, s := range j.Stages {
		var sc pipeline.StageConfig
		switch {
		case s.Sanitize != nil:
			emoji, err := stages.ParseEmojiPolicy(s.Sanitize.Emoji)
			if err != nil {
				return nil, usagef("%s: %v", b.at(i), err)
			}
			maxChars := orInt(s.Sanitize.MaxChars, stages.DefaultMaxChars)
			sc = pipeline.StageConfig{Stage: &stages.Sanitize{MaxChars: maxChars, Emoji: emoji}, Workers: workers, MaxAttempts: 1}
			b.defs[i].Fingerprint = fingerprint(maxChars, emoji)
		case s.LLM != nil:
			if sc, err = b.buildLLM(ctx, i, s.LLM, earlier, bo); err != nil {
				return nil, err
			}
		case s.Aggregate != nil:
			a := s.Aggregate
			agg := &stages.Aggregate{GroupBy: a.GroupBy, DateField: a.Date, RatingField: a.Rating, Count: a.Count}
			sc = pipeline.StageConfig{Stage: agg, Workers: workers, MaxAttempts: 1}
			groupBy := a.GroupBy
			if groupBy == nil {
				groupBy = stages.DefaultGroupBy
			}
			parts := []any{strings.Join(groupBy, ","), orStr(a.Date, stages.DefaultDateField), orStr(a.Rating, stages.DefaultRatingField)}
			if a.Count != "" && a.Count != "classify.label" {
				parts = append(parts, a.Count)
			}
			b.defs[i].Fingerprint = fingerprint(parts...)
		}
		b.stages = append(b.stages, sc)
		earlier = append(earlier, s.Name())
	}
	return b, nil
}

// at names stage i in messages: the job file's key, or (a job compiled
// from flags, which has no file) nothing.
func (b *jobStages) at(i int) string {
	if b.job.File == "" {
		return b.job.Stages[i].Name()
	}
	return fmt.Sprintf("%s: stages[%d] (%s)", b.job.File, i, b.job.Stages[i].Name())
}

// buildLLM builds LLM stage i: the classify preset as the built-in
// classify stage, any other as a general LLM stage.
func (b *jobStages) buildLLM(ctx context.Context, i int, l *job.LLM, earlier []string, bo buildOptions) (pipeline.StageConfig, error) {
	j, at := b.job, b.at(i)
	batched := l.Mode == job.ModeBatch || l.Mode == job.ModeAuto
	prompt, system := l.Prompt, l.System
	for _, f := range []struct {
		name string
		into *string
	}{{l.PromptFile, &prompt}, {l.SystemFile, &system}} {
		if f.name != "" {
			data, err := j.ReadFile(f.name)
			if err != nil {
				return pipeline.StageConfig{}, usagef("%s: %v", at, err)
			}
			*f.into = string(data)
		}
	}
	tier := stages.TierConfig{Tier: l.Tier, FlexDeadline: l.Deadline(), FlexTimeout: bo.FlexTimeout}
	var (
		st    interface{ Fingerprint() string }
		stage pipeline.Stage
		model string
	)
	if l.Preset == job.PresetClassify {
		cl, err := stages.NewClassify(ctx, stages.ClassifyConfig{
			APIKey: bo.APIKey, BaseURL: j.BaseURL, Model: l.Model, Labels: l.Output.Label, PromptTemplate: prompt,
			Timeout: job.Duration(l.Timeout), MaxOutputTokens: l.MaxOutputTokens, Tier: tier,
		})
		if err != nil {
			return pipeline.StageConfig{}, usagef("%v", err)
		}
		b.classify, st, stage, model = cl, cl, cl, cl.Model()
		b.defs[i].Reads = classifyReads(prompt)
	} else {
		ls, err := b.newLLM(ctx, at, l, prompt, system, earlier, tier, bo)
		if err != nil {
			return pipeline.StageConfig{}, err
		}
		st, stage, model = ls, ls, ls.Model()
	}
	b.llm[l.Name] = l
	b.defs[i].Fingerprint = st.Fingerprint()
	if batched {
		bs, ok := stage.(batch.Stage)
		if !ok {
			return pipeline.StageConfig{}, usagef("%s: mode: %s: this stage cannot be asked through batch jobs", at, l.Mode)
		}
		b.batched = append(b.batched, batchedStage{stage: bs, llm: l})
	}
	// The list price (or the job's) with its cached-input rate and tier
	// factors: a flex call at half, a priority one above, cached input at
	// its own rate.
	var over job.Price
	if l.Price != nil {
		over = *l.Price
	}
	price, err := stages.StagePrice(stages.PriceConfig{Model: model, InputPerM: over.Input, OutputPerM: over.Output}, bo.NeedPrice)
	if err != nil {
		return pipeline.StageConfig{}, usage(bo.wordPrice(err, at))
	}
	b.prices[l.Name] = price
	// Workers: as many as the limiter addLimiters gives it can ever let
	// be in flight (pipeline.PoolSizer). A max_refused of 0 (never stop
	// for refusals) is the pipeline's negative MaxRefused.
	maxRefused := job.Duration(l.MaxRefused)
	if l.MaxRefused != "" && maxRefused == 0 {
		maxRefused = -1
	}
	return pipeline.StageConfig{Stage: stage, MaxAttempts: l.MaxAttempts, Price: price,
		MaxWait: job.Duration(l.MaxWait), MaxOutage: job.Duration(l.MaxOutage), MaxRefused: maxRefused}, nil
}

// newLLM builds a general LLM stage (any but the classify preset); at
// names it in messages.
func (b *jobStages) newLLM(ctx context.Context, at string, l *job.LLM, prompt, system string, earlier []string, tier stages.TierConfig, bo buildOptions) (*stages.LLM, error) {
	j := b.job
	cfg := stages.LLMConfig{
		Name: l.Name, Model: l.Model, Labels: l.Output.Label, When: l.When, Earlier: earlier,
		MaxOutputTokens: l.MaxOutputTokens, PromptTemplate: prompt, SystemInstruction: system,
		Endpoint:       stages.Endpoint{Backend: j.Backend, APIKey: bo.APIKey, BaseURL: j.BaseURL, Project: j.Project, Location: j.Location},
		EarlierOutputs: map[string][]string{}, Timeout: job.Duration(l.Timeout), Tier: tier,
	}
	outputs := j.OutputFields()
	for _, e := range earlier {
		if f, ok := outputs[e]; ok {
			cfg.EarlierOutputs[e] = f
		}
	}
	if l.Output.SchemaFile != "" {
		var err error
		if cfg.Schema, err = j.ReadFile(l.Output.SchemaFile); err != nil {
			return nil, usagef("%s: %v", at, err)
		}
	}
	ls, err := stages.NewLLM(ctx, cfg)
	if err != nil {
		return nil, usagef("%s: %v", j.File, err)
	}
	return ls, nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// fleetQuota is a store whose workers share one quota (PostgreSQL).
type fleetQuota interface {
	FleetLimiter(ctx context.Context, cfg postgres.FleetLimitConfig) (*postgres.FleetLimiter, error)
}

// addLimiters gives each LLM stage its own limiter, starting from the
// limit that stage learned in earlier runs (Gemini quotas are per model),
// unless its limiter is fixed or names a start. In a PostgreSQL pipeline
// whose quota is shared (the default) it is the fleet's limiter of the
// stage's quota key (gemini/MODEL unless the job names one), shared with
// every worker.
func (b *jobStages) addLimiters(ctx context.Context, db pipeline.Database, log *slog.Logger) error {
	fq, fleet := db.(fleetQuota)
	if f := b.job.Fleet; f != nil && f.Quota == quotaIndependent {
		fleet = false
	}
	for i, sc := range b.stages {
		l := b.llm[sc.Stage.Name()]
		if l == nil {
			continue
		}
		lc := l.Limiter
		if lc.Fixed > 0 {
			lim := limiter.New(limiter.Config{Fixed: true, Start: lc.Fixed, Floor: lc.Fixed, Ceiling: lc.Fixed, RPM: lc.RPM, TPM: int64(lc.TPM), PaceTPM: lc.TPM > 0})
			b.limiters[l.Name], b.stages[i].Limiter = lim, lim
			continue
		}
		start, startRate, learned := lc.Start, 0.0, false
		if _, other := b.newModel[l.Name]; start <= 0 && !other {
			start, startRate = learnedState(db, l.Name)
			learned = start > 0
		}
		var lim pipeline.Limiter = limiter.New(limiter.Config{
			// A learned limit with no rate: the quota never bounded the
			// run that left it (or an older version saved no rate), so
			// it says what that run needed, not what the quota admits:
			// climb from it rather than pace the rate it carries.
			Start: start, StartRate: startRate, SlowStart: learned && startRate <= 0,
			Floor: lc.Floor, Ceiling: limiterCeiling(lc.Ceiling, db, l.Tier), DecreaseFactor: lc.Decrease,
			Cooldown: job.Duration(lc.Cooldown), TPM: int64(lc.TPM), PaceTPM: lc.TPM > 0, RPM: lc.RPM,
		})
		if m, ok := sc.Stage.(interface{ Model() string }); ok && fleet {
			key := "gemini/" + m.Model()
			if f := b.job.Fleet; f != nil && f.QuotaKey != "" {
				key = f.QuotaKey
			}
			fl, err := fq.FleetLimiter(ctx, postgres.FleetLimitConfig{
				Key: key, Start: start, Floor: lc.Floor, Ceiling: limiterCeiling(lc.Ceiling, db, l.Tier), DecreaseFactor: lc.Decrease, RPM: lc.RPM, Log: log,
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

// noteNewModels finds the LLM stages whose model differs from the job db
// stored, so that their limiters do not start from the limit learned for
// the old model, and says so where one was learned. The learned state is
// cleared when the job is saved (clearLearned), so that a run of the new
// model that ends early does not hand the old limit on either.
func (b *jobStages) noteNewModels(db pipeline.Database, stderr io.Writer) {
	jdb, ok := db.(jobDatabase)
	if !ok {
		return
	}
	raw, err := jdb.Job()
	if err != nil || raw == nil {
		return
	}
	st, err := job.UnmarshalStored(raw)
	if err != nil {
		return
	}
	old, err := st.Job(db.Path())
	if err != nil {
		return
	}
	for _, ol := range old.LLMStages() {
		nl := b.llm[ol.Name]
		if nl == nil || nl.Model == ol.Model || ol.Model == "" {
			continue
		}
		if b.newModel == nil {
			b.newModel = map[string]string{}
		}
		b.newModel[ol.Name] = ol.Model
		if limit, _ := learnedState(db, ol.Name); limit > 0 && nl.Limiter.Start <= 0 {
			fmt.Fprintf(stderr, "%s: model %s, not %s: its limiter starts afresh, not from the limit of %d learned for %s\n", ol.Name, nl.Model, ol.Model, limit, ol.Model)
		}
	}
}

// clearLearned forgets the limits learned for the stages' old models.
func (b *jobStages) clearLearned(db learnedStore) error {
	for name := range b.newModel {
		for _, key := range []string{name, rateKey(name), pacedRateKey(name)} {
			if err := db.SetLearnedLimit(key, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// saveLearned keeps what each adaptive limiter learned for the next run
// to start from. A limit learned in a quota storm or a failed run (the
// floor) is no guide for tomorrow: the last good one is kept then.
func (b *jobStages) saveLearned(db pipeline.Database, sum pipeline.RunSummary) error {
	if sum.Status != "complete" && sum.Message != "interrupted" {
		return nil
	}
	for name, lim := range b.limiters {
		if sum.Stages[name] == nil || b.llm[name].Limiter.Fixed > 0 {
			continue
		}
		if err := saveLearnedState(db, name, lim); err != nil {
			return err
		}
	}
	return nil
}

// lease is how long a fleet worker's claim lasts (0: the default).
func (b *jobStages) lease() time.Duration {
	if b.job.Fleet == nil {
		return 0
	}
	return job.Duration(b.job.Fleet.Lease)
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
			return usagef("%s: stage %s: model %s is not in the price table (%s, as of %s), so a budget cannot be kept: give it price.input_per_m and price.output_per_m, run it on a listed model, or without --budget/--budget-total",
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
	ji := j.Input
	in := inputOptions{Path: ji.Path, Format: ji.Format, IDField: orStr(ji.ID, "id"), TextField: orStr(ji.Text, "text"),
		MaxLine: orInt(ji.MaxLineBytes, ingest.DefaultMaxLineBytes), MaxFieldLines: orInt(ji.MaxFieldLines, ingest.DefaultMaxFieldLines),
		DateFormat: ji.DateFormat, RatingRange: orStr(ji.RatingRange, ingest.DefaultRatingRange)}
	in.Path = jobInputPath(j)
	in.Names = jobInputNames
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

// definesPipeline reports whether the run names a flag that defines the
// pipeline (any but jobRunFlags, the run's own), from the command line,
// a SAWTOOTH_* variable or --config.
func definesPipeline(c *cli.Context) bool {
	for _, f := range c.Command.Flags {
		if name := f.Names()[0]; c.IsSet(name) && !jobRunFlags[name] {
			return true
		}
	}
	return false
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
		return usagef("%s: a job says how each LLM stage runs in its file (`mode: batch` or `mode: auto`, with a `batch:` block), not with flags beside it", strings.Join(bad, ", "))
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
