package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
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
	limiters map[string]*limiter.AIMD
	prices   map[string][2]float64
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
		} else if !filepath.IsAbs(j.DB) {
			j.DB = filepath.Join(j.Dir, j.DB)
		}
		return j, nil
	}
	if db == "" {
		return nil, nil
	}
	if fi, err := os.Stat(db); err != nil || fi.Size() == 0 {
		return nil, nil
	}
	raw, err := store.ReadJob(db)
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
	b := &jobStages{job: j, stored: stored, llm: map[string]*job.LLM{}, limiters: map[string]*limiter.AIMD{}, prices: map[string][2]float64{}}
	b.defs = j.StageDefs(stored.Files)
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
			sc = pipeline.StageConfig{Stage: &stages.Sanitize{MaxChars: orInt(s.Sanitize.MaxChars, stages.DefaultMaxChars), Emoji: emoji}, Workers: pipeline.DefaultWorkers, MaxAttempts: 1}
		case s.LLM != nil:
			l := s.LLM
			if l.Mode == job.ModeBatch {
				return nil, usagef("%s: mode: batch is not available in this build yet: use `mode: online` (or leave it out)", at)
			}
			cfg := stages.LLMConfig{
				Name: l.Name, Model: l.Model, Labels: l.Output.Label, When: l.When, Earlier: earlier,
				MaxOutputTokens: l.MaxOutputTokens, PromptTemplate: l.Prompt, SystemInstruction: l.System,
				Endpoint: stages.Endpoint{Backend: j.Backend, APIKey: apiKey, BaseURL: j.BaseURL, Project: j.Project, Location: j.Location},
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
			in, out := stages.Price(st.Model())
			b.prices[l.Name] = [2]float64{in, out}
			sc = pipeline.StageConfig{Stage: st, Workers: orInt(l.Limiter.Ceiling, limiter.DefaultCeiling), MaxAttempts: l.MaxAttempts}
		case s.Aggregate != nil:
			a := s.Aggregate
			sc = pipeline.StageConfig{Stage: &stages.Aggregate{GroupBy: a.GroupBy, DateField: a.Date, RatingField: a.Rating, Count: a.Count},
				Workers: pipeline.DefaultWorkers, MaxAttempts: 1}
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
func (b *jobStages) addLimiters(db *store.DB) {
	for i, sc := range b.stages {
		l := b.llm[sc.Stage.Name()]
		if l == nil {
			continue
		}
		start := l.Limiter.Start
		if start == 0 {
			start = db.LearnedLimit(l.Name)
		}
		lim := limiter.New(limiter.Config{Start: start, Floor: l.Limiter.Floor, Ceiling: l.Limiter.Ceiling})
		b.limiters[l.Name] = lim
		b.stages[i].Limiter = lim
	}
}

// cost prices one stage's usage (zero for a stage that calls nothing).
func (b *jobStages) cost(stage string, u pipeline.Usage) float64 {
	p := b.prices[stage]
	return (float64(u.PromptTokens)*p[0] + float64(u.CandidateTokens)*p[1]) / 1e6
}

// jobRequest is what `run -f` (or a resume of a stored job) asks.
type jobRequest struct {
	Job          *job.Job
	APIKey       string
	RerunChanged bool
	// Resume says the job is the one the database recorded, run with no
	// --input: a stored input file that is gone is skipped, not an error.
	Resume bool
	// RetryStage, if set, re-queues that stage's dead letters first
	// (retry and rerun ingest nothing).
	RetryStage string
	// RerunFrom, if set, re-runs every item that reached that stage
	// (rerun --from-stage): with DryRun it only says how many; more than
	// ConfirmAbove items need Yes or a Confirm.
	RerunFrom    string
	DryRun, Yes  bool
	ConfirmAbove int
	Confirm      func(question string) bool
	Quiet, JSON  bool
	Grace        time.Duration
	Obs          monitor.Options
	Out, ErrOut  io.Writer
	ExitNow      func(error)
}

// runJob runs a job: build every stage, open the DB (a stage added to
// the stored list runs for the items already past it), settle a changed
// job (refused with its diff, or re-run with --rerun-changed), ingest,
// record the job, drain, summarise.
func runJob(ctx context.Context, req jobRequest) error {
	j, stderr := req.Job, req.ErrOut
	sigOut := monitor.NewSwitchWriter(stderr)
	ctx, stop := withSignals(ctx, sigOut, req.ExitNow)
	defer stop()
	b, err := buildJob(ctx, j, req.APIKey)
	if err != nil {
		return err
	}
	if err := checkDBPath(j.DB, false); err != nil {
		return err
	}
	var plan *ingest.Plan
	if j.Input.Path != "" && req.RetryStage == "" && req.RerunFrom == "" {
		if _, err := os.Stat(jobInputPath(j)); err != nil && req.Resume {
			// The stored job's input is gone (last night's file): resume
			// what the database holds.
			fmt.Fprintf(stderr, "the job's input %s is not there: resuming what %s holds (give --input FILE for new items)\n", jobInputPath(j), j.DB)
		} else if plan, err = checkJobInput(ctx, j, stderr); err != nil {
			return err
		}
	}
	if !req.RerunChanged {
		if err := refuseChangeBeforeGrowth(j.DB, b); err != nil {
			return err
		}
	}
	db, err := store.Open(j.DB, store.Options{Stages: b.defs})
	if err != nil {
		if errors.Is(err, store.ErrDefinition) {
			return usagef("%v", err)
		}
		return err
	}
	defer db.Close()
	if added := db.AddedStages(); len(added) > 0 {
		fmt.Fprintf(stderr, "stage %s added to the job: the items already past it go through it (and the stages after it) once; nothing before it is paid again\n", strings.Join(added, ", "))
	}
	if err := settleChanges(db, b, req); err != nil {
		return err
	}
	if plan != nil {
		if err := ingestFile(ctx, db, plan, stderr); err != nil {
			return err
		}
	}
	if req.RerunFrom != "" {
		if stop, err := rerunJobFrom(db, req); stop || err != nil {
			return err
		}
	}
	if req.RetryStage != "" {
		n, err := db.Requeue(req.RetryStage, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "re-queued %s at %s\n", plural(n, "dead letter"), req.RetryStage)
	}
	if err := db.SaveJob(b.stored.WithDir(j.Dir).Marshal()); err != nil {
		return err
	}
	b.addLimiters(db)

	runID := store.NewRunID(time.Now())
	rc := monitor.RunConfig{DBPath: db.Path(), RunID: runID, Quiet: req.Quiet, StageCost: b.cost}
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	for _, s := range counts.Stages {
		rc.Stages = append(rc.Stages, s.Stage)
		rc.Queued = append(rc.Queued, int64(s.Queued))
		rc.Before = append(rc.Before, int64(s.Output+s.Dead))
		var lim pipeline.Limiter
		if l := b.limiters[s.Stage]; l != nil {
			lim = l
		}
		rc.Limiters = append(rc.Limiters, lim)
	}
	prog, err := monitor.Start(stderr, req.Obs, rc)
	if err != nil {
		return usage(err)
	}
	sigOut.Set(prog.Writer())
	r := &pipeline.Runner{Store: db, Stages: b.stages, RunID: runID, Grace: req.Grace, OnTick: prog.Tick, Log: prog.Log()}
	sum, runErr := r.Run(ctx)
	prog.Close()
	for name, lim := range b.limiters {
		if st := sum.Stages[name]; st != nil {
			st.CostUSD = b.cost(name, st.Usage)
			if sum.Status == "complete" || sum.Message == "interrupted" {
				if err := db.SetLearnedLimit(name, lim.Limit()); err != nil && runErr == nil {
					runErr = err
				}
			}
		}
	}
	if err := db.SaveRun(sum); err != nil && runErr == nil {
		runErr = err
	}
	if err := monitor.PrintSummary(req.Out, stageOrder(db), sum, req.JSON, nextCommands(db.Path(), sum)); err != nil && runErr == nil {
		runErr = err
	}
	if errors.Is(runErr, pipeline.ErrStopped) {
		fmt.Fprintf(stderr, "stopped early; nothing is lost. To resume:\n  sawtooth run --db %s\n", shellQuote(db.Path()))
	}
	return runErr
}

// settleChanges compares the job with the one the DB recorded. A stage
// whose answers would change (model, prompt, schema, labels, condition,
// a file's contents) is refused with the diff, unless --rerun-changed:
// then that stage and every stage after it run again. Changes that do not
// change answers (input, limiter, mode) are shown and adopted.
func settleChanges(db *store.DB, b *jobStages, req jobRequest) error {
	var diff []job.Change
	if raw, err := db.Job(); err == nil && raw != nil {
		if old, err := job.UnmarshalStored(raw); err == nil {
			diff, _ = job.Diff(old, b.stored)
		}
	}
	added := db.AddedStages()
	diff = slices.DeleteFunc(diff, func(c job.Change) bool { return c.Key == "" && slices.Contains(added, c.Stage) })
	changed := db.ChangedStages()
	if len(changed) == 0 {
		if len(diff) > 0 {
			fmt.Fprintf(req.ErrOut, "the job changed since the last run, in ways that change no stage's answers:\n  %s\n", joinChanges(diff))
		}
		return nil
	}
	produced, err := producedFrom(db, changed[0])
	if err != nil {
		return err
	}
	if !produced {
		return db.AcceptDefinition()
	}
	if !req.RerunChanged {
		return changedError(db.Path(), changed, diff)
	}
	n, err := db.Rerun(changed[0])
	if err != nil {
		return err
	}
	if err := db.AcceptDefinition(); err != nil {
		return err
	}
	fmt.Fprintf(req.ErrOut, "stage %s changed:\n  %s\nre-queued %s at %s\n", changed[0], joinChanges(diff), plural(n, "item"), changed[0])
	return nil
}

// rerunJobFrom sends every item that reached req.RerunFrom back there.
// It asks first above --confirm-above items (a re-run pays again), and
// with --dry-run only says how many items would move (stop).
func rerunJobFrom(db *store.DB, req jobRequest) (stop bool, err error) {
	counts, err := db.Counts()
	if err != nil {
		return true, err
	}
	items, from := counts.Done, false
	var stages []string
	for _, s := range counts.Stages {
		from = from || s.Stage == req.RerunFrom
		if from {
			items += s.Queued + s.Dead
			stages = append(stages, s.Stage)
		}
	}
	what := fmt.Sprintf("re-run %s for %s", strings.Join(stages, ", "), plural(items, "item"))
	if req.DryRun {
		fmt.Fprintf(req.Out, "would %s (one call each at every LLM stage among them); nothing was changed\n", what)
		return true, nil
	}
	if items > req.ConfirmAbove && !req.Yes && (req.Confirm == nil || !req.Confirm(what+"?")) {
		return true, usagef("stopped before it would %s (more than --confirm-above %d); nothing was changed. To go ahead, run the same command with --yes", what, req.ConfirmAbove)
	}
	n, err := db.Rerun(req.RerunFrom)
	if err != nil {
		return true, err
	}
	fmt.Fprintf(req.ErrOut, "rerun --from-stage %s: re-queued %s\n", req.RerunFrom, plural(n, "item"))
	return false, nil
}

// changedError refuses a run whose job changed stages that produced
// answers, with the diff.
func changedError(path string, changed []string, diff []job.Change) error {
	msg := fmt.Sprintf("the job changed since %s was last run, in stage %s", path, strings.Join(changed, ", "))
	if len(diff) > 0 {
		msg += ":\n  " + joinChanges(diff)
	}
	return usagef("%s\nRe-running %s and the stages after it re-pays the items that reached it: run again with --rerun-changed to do so, or restore the job as it was (`sawtooth job show --db %s`); nothing was changed",
		msg, changed[0], shellQuote(path))
}

// refuseChangeBeforeGrowth refuses, before the store opens, a job that
// both adds stages and changes a kept one: opening would already record
// the added stages (and re-queue the items past them), and a refusal
// after that would not leave the database as it was. Without added
// stages the refusal comes after the open, which then writes nothing.
func refuseChangeBeforeGrowth(path string, b *jobStages) error {
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil
	}
	stored, err := store.ReadDefinition(path, 0)
	if err != nil || len(stored) == len(b.defs) {
		return nil // Open says what is wrong, or nothing was added
	}
	fingerprint := map[string]string{}
	for _, d := range b.defs {
		fingerprint[d.Name] = d.Fingerprint
	}
	var changed []string
	for _, d := range stored {
		if fp, kept := fingerprint[d.Name]; kept && fp != d.Fingerprint {
			changed = append(changed, d.Name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	var diff []job.Change
	if raw, err := store.ReadJob(path); err == nil && raw != nil {
		if old, err := job.UnmarshalStored(raw); err == nil {
			diff, _ = job.Diff(old, b.stored)
		}
	}
	return changedError(path, changed, diff)
}

func joinChanges(cs []job.Change) string {
	lines := make([]string, len(cs))
	for i, c := range cs {
		lines[i] = c.String()
	}
	return strings.Join(lines, "\n  ")
}

// checkJobInput checks the job's input file (relative to the job file)
// with the aggregate's fields, as --input is checked.
func checkJobInput(ctx context.Context, j *job.Job, stderr io.Writer) (*ingest.Plan, error) {
	in := inputOptions{Path: j.Input.Path, Format: j.Input.Format, IDField: orStr(j.Input.ID, "id"), TextField: orStr(j.Input.Text, "text"),
		MaxLine: ingest.DefaultMaxLineBytes, MaxFieldLines: ingest.DefaultMaxFieldLines, RatingRange: ingest.DefaultRatingRange}
	in.Path = jobInputPath(j)
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
	"db": true, "file": true, "input": true, "stage": true, "from-stage": true, "dry-run": true, "yes": true, "confirm-above": true, "rerun-changed": true, "json": true, "quiet": true, "grace": true,
	"log-format": true, "log-level": true, "metrics-addr": true, "config": true,
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
