package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// initOptions are `sawtooth init`'s.
type initOptions struct {
	// File is the job file to write; Force overwrites it.
	File  string
	Force bool
	// Sample is the input written beside it when none exists.
	Sample []byte
	ErrOut io.Writer
}

func newInitCommand(cfg Config) *cli.Command {
	opts := initOptions{Sample: cfg.DemoReviews}
	return &cli.Command{
		Name:      "init",
		Usage:     "write a commented starter job file (and its prompt, and a sample input when there is none)",
		ArgsUsage: "[FILE]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "overwrite an existing job file", Destination: &opts.Force},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef("init takes one job file name, got %d arguments", c.NArg())
			}
			opts.File = c.Args().First()
			if opts.File == "" {
				opts.File = "sawtooth.yaml"
			}
			opts.ErrOut = c.App.ErrWriter
			return runInit(&opts)
		},
	}
}

// runInit writes the starter job, its prompt template and, when the
// directory has no reviews.jsonl, the demo's reviews as a sample input.
// It refuses to overwrite the job file without --force, and never
// overwrites the others.
func runInit(opts *initOptions) error {
	dir := filepath.Dir(opts.File)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef("init: the directory %s of %s does not exist: create it first, or give another path", dir, opts.File)
	}
	if fi, err := os.Stat(opts.File); err == nil && fi.IsDir() {
		return usagef("init: %s is a directory: give the job file's name, e.g. %s", opts.File, filepath.Join(opts.File, "sawtooth.yaml"))
	}
	if _, err := os.Stat(opts.File); err == nil && !opts.Force {
		return usagef("%s exists: give another name, or --force to overwrite it", opts.File)
	}
	files := []struct {
		name string
		data []byte
		keep bool
	}{
		{opts.File, []byte(job.Starter), false},
		{filepath.Join(dir, "classify.tmpl"), []byte(job.StarterPrompt), true},
		{filepath.Join(dir, "reviews.jsonl"), opts.Sample, true},
	}
	for _, f := range files {
		if f.keep {
			if _, err := os.Stat(f.name); err == nil || len(f.data) == 0 {
				continue
			}
		}
		if err := os.WriteFile(f.name, f.data, 0o644); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		fmt.Fprintf(opts.ErrOut, "wrote %s\n", f.name)
	}
	fmt.Fprintf(opts.ErrOut, "next: set GEMINI_API_KEY, then\n  sawtooth plan -f %s\n  sawtooth run -f %s\n", shellQuote(opts.File), shellQuote(opts.File))
	return nil
}

func newJobCommand() *cli.Command {
	var db string
	return &cli.Command{
		Name:   "job",
		Usage:  "the job a database was run with",
		Action: unknownSubcommand("job", "show"),
		Subcommands: []*cli.Command{{
			Name:   "show",
			Usage:  "print the stored job as YAML (a job file: run -f with it resumes the same job)",
			Flags:  []cli.Flag{&cli.StringFlag{Name: "db", Usage: dbUsage + " (required)", Required: true, Destination: &db}},
			Action: func(c *cli.Context) error { return runJobShow(db, c.App.Writer) },
		}},
	}
}

// runJobShow prints the job the database at path recorded.
func runJobShow(path string, out io.Writer) error {
	if err := checkDBPath(path, true); err != nil {
		return err
	}
	raw, err := readStoredJob(path)
	if err != nil {
		return err
	}
	if raw == nil {
		return usagef("%s records no job: an older sawtooth ran it from flags; any run on it records its job (`sawtooth run --db %s` resumes it with the settings it recorded), or `sawtooth run -f JOB.yaml --db %s`", path, shellQuote(path), shellQuote(path))
	}
	st, err := job.UnmarshalStored(raw)
	if err != nil {
		return fmt.Errorf("%s: the stored job is damaged: %w", path, err)
	}
	db := "" // a PostgreSQL job keeps its stored, redacted URL
	if !isPostgres(path) {
		db = absPath(path)
	}
	if st, err = st.Anchored(db); err != nil {
		return fmt.Errorf("%s: the stored job is damaged: %w", path, err)
	}
	_, err = io.WriteString(out, st.Show())
	return err
}

// planOptions are `sawtooth plan`'s.
type planOptions struct {
	File string
	DB   string
	// Count asks countTokens (free) for the input tokens of a sample of
	// Count items per LLM stage; 0 estimates them from the text length.
	Count int
	Out   io.Writer
	Err   io.Writer
}

func newPlanCommand() *cli.Command {
	var opts planOptions
	return &cli.Command{
		Name:  "plan",
		Usage: "estimate a job without calling anything: items, calls, tokens and cost per stage, and the time at the learned limits",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "job `FILE`", Destination: &opts.File},
			&cli.StringFlag{Name: "db", Usage: "the job's database, a bbolt file or a PostgreSQL one: `FILE|postgres://URL` (default: the job's db); without -f, its stored job", Destination: &opts.DB},
			&cli.IntFlag{Name: "count-tokens", Usage: "measure input tokens with the API's countTokens (free, nothing generated) on `N` sample items per LLM stage", Destination: &opts.Count},
		},
		Action: func(c *cli.Context) error {
			if opts.File == "" && opts.DB == "" {
				return usagef("plan needs -f JOB.yaml or --db FILE")
			}
			opts.Out, opts.Err = c.App.Writer, c.App.ErrWriter
			return runPlan(c.Context, &opts)
		},
	}
}

// runPlan estimates the job against the database it names: only the
// work the run would do (what readJobWork reads: new and edited items,
// the items an added stage or a re-run sends back, those still queued),
// priced per stage from what earlier runs measured, or rough defaults
// without them. A changed stage is priced as --rerun-changed would
// re-run it, and the plan says the run refuses it without that flag.
func runPlan(ctx context.Context, opts *planOptions) error {
	j, err := planJob(opts)
	if err != nil {
		return err
	}
	return wordStore(planFor(ctx, opts, j), j.DB) // the job's db, which --db need not name
}

// planFor prints the plan of j.
func planFor(ctx context.Context, opts *planOptions, j *job.Job) error {
	in := job.PlanInput{PromptChars: promptChars(j), Learned: map[string]int{}, History: map[string]job.History{}, Price: stages.Price}
	if db := openForPlan(j.DB); db != nil {
		readHistory(db, j, &in)
		db.Close()
	}
	input, err := measureInput(ctx, j, opts, &in)
	if err != nil {
		return err
	}
	// Nothing is called: a key the stages are built with is never sent.
	b, err := buildJob(ctx, j, buildOptions{APIKey: cmp.Or(apiKeyFromEnv(), "plan-sends-nothing")})
	if err != nil {
		return err
	}
	w, err := readJobWork(ctx, b, workRequest{RerunChanged: true}, input)
	if err != nil {
		return err
	}
	in.Work = map[string]job.StageWork{}
	for _, s := range w.Stages {
		in.Work[s.Stage] = s
	}
	printWork(opts.Out, j, w)
	plans := job.Estimate(j, in)
	if err := printPlan(opts.Out, plans); err != nil {
		return err
	}
	printCachePlan(opts.Out, b.stages, plans)
	if len(w.Changed) > 0 {
		fmt.Fprintf(opts.Out, "`sawtooth run` refuses this job as it stands: stage %s changed and has answers; the figures above are what `run --rerun-changed` would re-run and pay\n", strings.Join(w.Changed, ", "))
	}
	fmt.Fprintln(opts.Out, "nothing was called; calls counted from the database's items (their when:, the answers kept) where their input is known, else \"estimated\" (every item sent past a when:, tokens from the text length, 4 characters a token, 1 s a call) or \"learned\" (from the database's past runs)")
	return nil
}

// planJob is the job plan prices: the file -f names, else the one the
// database records, whatever compiled it.
func planJob(opts *planOptions) (*job.Job, error) {
	if opts.File == "" {
		// loadJob takes a missing database for one without a job.
		if err := checkDBPath(opts.DB, true); err != nil {
			return nil, err
		}
	}
	j, err := loadJob(opts.File, opts.DB)
	if err != nil {
		return nil, err
	}
	if j == nil && opts.File == "" {
		// loadJob leaves a job compiled from flags to the flags' run;
		// plan prices it as any other.
		if st, err := loadStored(opts.DB); err != nil {
			return nil, err
		} else if st != nil {
			if j, err = storedJobOf(opts.DB, st); err != nil {
				return nil, err
			}
		}
	}
	if j == nil {
		return nil, usagef("%s records no job: give -f JOB.yaml", opts.DB)
	}
	if err := checkDBPath(j.DB, false); err != nil {
		return nil, err
	}
	return j, nil
}

// promptChars is the length of each LLM stage's prompt and system
// instruction as written (its default system instruction when it gives
// neither).
func promptChars(j *job.Job) map[string]int {
	chars := map[string]int{}
	for _, l := range j.LLMStages() {
		n := len(l.Prompt) + len(l.System)
		for _, f := range []string{l.PromptFile, l.SystemFile} {
			if f != "" {
				b, _ := j.ReadFile(f)
				n += len(b)
			}
		}
		if n == 0 {
			n = len(stages.DefaultSystemInstruction(l.Output.Label))
		}
		chars[l.Name] = n
	}
	return chars
}

// measureInput checks the job's input and sample and measures the input
// into in: its average text length and the tokens of its first
// opts.Count items. The input's plan is nil when the job names none.
func measureInput(ctx context.Context, j *job.Job, opts *planOptions, in *job.PlanInput) (*ingest.Plan, error) {
	if j.Input.Path == "" {
		return nil, checkJobSample(j, nil)
	}
	input, err := checkJobInput(ctx, j, opts.Err)
	if err != nil {
		return nil, err
	}
	if err := checkJobSample(j, input); err != nil {
		return nil, err
	}
	var chars, n int
	var sample []pipeline.Record
	if _, err = input.Apply(ctx, ingestBatch, func(recs []pipeline.Record) error {
		for _, r := range recs {
			n++
			chars += len([]rune(r.Text))
			if len(sample) < opts.Count {
				sample = append(sample, r)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(sample) > 0 {
		if in.Counted, err = countTokens(ctx, j, sample); err != nil {
			return nil, err
		}
	}
	if n > 0 {
		in.AvgTextChars = float64(chars) / float64(n)
	}
	return input, nil
}

// printWork says what the plan prices against the stored job: the diff,
// added stages, the re-run and the input's new and edited items.
func printWork(out io.Writer, j *job.Job, w *jobWork) {
	if !w.Exists {
		return
	}
	if len(w.Diff) > 0 {
		fmt.Fprintf(out, "the job differs from the one %s was last run with:\n  %s\n", j.DB, joinChanges(w.Diff))
	}
	if len(w.Added) > 0 {
		fmt.Fprintf(out, "stage %s added: only the items that reach it are priced (nothing before it is paid again)\n", strings.Join(w.Added, ", "))
	}
	if w.RerunFrom != "" {
		fmt.Fprintf(out, "stage %s changed: --rerun-changed re-runs %s for %s\n", w.Changed[0], strings.Join(w.RerunStages, ", "), plural(w.Rerun, "item"))
	}
	if j.Input.Path != "" {
		fmt.Fprintf(out, "%s: %s new", j.Input.Path, plural(w.New, "item"))
		if w.Edited > 0 {
			fmt.Fprintf(out, ", %d edited", w.Edited)
		}
		fmt.Fprintf(out, " (the database has %s already; only the work below is paid)\n", plural(w.Stored, "item"))
	}
}

// printPlan writes the plan's table, one row per stage and the total.
func printPlan(out io.Writer, plans []job.StagePlan) error {
	w := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "stage\tmodel\titems\tcalls\ttokens in\ttokens out\test. cost\tlimit\ttime\tbasis\t")
	var cost float64
	var total time.Duration
	for _, p := range plans {
		if p.Model == "" {
			fmt.Fprintf(w, "%s\t\t%d\t0\t0\t0\t$0.0000\t\t\t\t\n", p.Stage, p.Items)
			continue
		}
		cost += p.CostUSD
		total += p.Duration
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t$%.4f\t%d\t%s\t%s\t\n", p.Stage, p.Model, p.Items, p.Calls, p.PromptTokens, p.OutputTokens, p.CostUSD, p.Limit, p.Duration, p.Basis)
	}
	fmt.Fprintf(w, "total\t\t\t\t\t\t$%.4f\t\t%s\t\t\n", cost, total)
	return w.Flush()
}

// readHistory adds what the database's past runs measured to in.
func readHistory(db pipeline.Database, j *job.Job, in *job.PlanInput) {
	runs, _ := db.Runs(1000)
	for _, r := range runs {
		secs := r.Ended.Sub(r.Started).Seconds()
		for name, st := range r.Stages {
			h := in.History[name]
			h.Done += st.Done
			h.Attempts += st.Attempts
			h.Calls += st.Calls
			h.PromptTokens += st.Usage.PromptTokens
			h.OutputTokens += st.Usage.CandidateTokens
			h.Seconds += secs
			h.Limit = max(h.Limit, st.LimitEnd)
			in.History[name] = h
		}
	}
	for _, l := range j.LLMStages() {
		in.Learned[l.Name] = db.LearnedLimit(l.Name)
	}
}

// openForPlan opens the database at path read-only with the stages it
// holds (a job may add some), nil when there is none.
func openForPlan(path string) pipeline.Database {
	if !dbExists(path) {
		return nil
	}
	stored, err := readStoredStages(path, 0)
	if err != nil {
		return nil
	}
	db, err := openDatabase(path, dbOpen{Stages: stored, ReadOnly: true, MustExist: true}, func() (*store.DB, error) {
		return store.Open(path, store.Options{Stages: stored, ReadOnly: true})
	})
	if err != nil {
		return nil
	}
	return db
}

// countTokens measures each LLM stage's mean input tokens on sample with
// the API's countTokens: free, nothing is generated.
func countTokens(ctx context.Context, j *job.Job, sample []pipeline.Record) (map[string]float64, error) {
	b, err := buildJob(ctx, j, buildOptions{APIKey: apiKeyFromEnv()})
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, sc := range b.stages {
		l, ok := sc.Stage.(*stages.LLM)
		if !ok {
			continue
		}
		var total int64
		for _, r := range sample {
			n, err := l.CountTokens(ctx, pipeline.Item{Record: r})
			if err != nil {
				return nil, fmt.Errorf("plan: countTokens for %s: %w", l.Name(), err)
			}
			total += n
		}
		out[l.Name()] = float64(total) / float64(len(sample))
	}
	return out, nil
}
