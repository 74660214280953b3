package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// batchCmdOptions are `sawtooth batch list|show|cancel`'s.
type batchCmdOptions struct {
	DB   string
	Job  uint64
	JSON bool
	// APIKey reaches the API for cancel (from the environment). BaseURL
	// is --base-url: "" means the endpoint recorded with the job, else
	// $GOOGLE_GEMINI_BASE_URL, else Google's.
	APIKey, BaseURL string
	// Settle is --batch-create-settle, as run takes it: how long after a
	// create was sent its job may still show up at the API.
	Settle      time.Duration
	Out, ErrOut io.Writer
}

func newBatchCommand() *cli.Command {
	var opts batchCmdOptions
	jobArg := func(c *cli.Context) error {
		if c.NArg() != 1 {
			return usagef("give one job number (see `sawtooth batch list --db %s`)", shellQuote(opts.DB))
		}
		n, err := strconv.ParseUint(c.Args().First(), 10, 64)
		if err != nil || n == 0 {
			return usagef("job %q: give the job's number as `sawtooth batch list` shows it", c.Args().First())
		}
		opts.Job = n
		return nil
	}
	setup := func(c *cli.Context) {
		opts.DB, opts.Out, opts.ErrOut = c.String("db"), c.App.Writer, c.App.ErrWriter
	}
	jsonFlag := &cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print JSON", Destination: &opts.JSON}
	return &cli.Command{
		Name:   "batch",
		Usage:  "list, show and cancel the Gemini batch jobs of a database (run --mode batch|auto creates them)",
		Action: unknownSubcommand("batch", "list", "show", "cancel"),
		Subcommands: []*cli.Command{
			{
				Name: "list", Usage: "every job: state, items, what came of them, age",
				Flags: []cli.Flag{dbFlag(), jsonFlag}, Before: before("db"),
				Action: func(c *cli.Context) error { setup(c); return runBatchList(&opts) },
			},
			{
				Name: "show", Usage: "one job's record, item ids included", ArgsUsage: "JOB",
				Flags: []cli.Flag{dbFlag()}, Before: before("db"),
				Action: func(c *cli.Context) error {
					setup(c)
					if err := jobArg(c); err != nil {
						return err
					}
					return runBatchShow(&opts)
				},
			},
			{
				Name:      "cancel",
				Usage:     "stop a job: asks the API for its state; a job that succeeded has its answers collected, a running one is cancelled and its items go back to the queue once the API confirms",
				ArgsUsage: "JOB",
				Flags: []cli.Flag{dbFlag(), &cli.StringFlag{Name: "base-url", Usage: "Gemini-compatible endpoint `URL` to ask",
					DefaultText: "the endpoint the job was created at, else $GOOGLE_GEMINI_BASE_URL, else Google's", Destination: &opts.BaseURL},
					&cli.DurationFlag{Name: "batch-create-settle", Value: batch.DefaultCreateSettle, Hidden: true, Usage: "as run's: how long after a create was sent its job may take to show in the API's list; until then a job not listed keeps its items", Destination: &opts.Settle}},
				Before: before("db"),
				Action: func(c *cli.Context) error {
					setup(c)
					if err := jobArg(c); err != nil {
						return err
					}
					if opts.Settle < 0 {
						return usagef("--batch-create-settle %s: use a positive duration (default %s)", opts.Settle, batch.DefaultCreateSettle)
					}
					opts.APIKey = apiKeyFromEnv()
					return runBatchCancel(c.Context, &opts)
				},
			},
		},
	}
}

// apiKeyFromEnv is the key as run reads it.
func apiKeyFromEnv() string {
	if k := os.Getenv("GEMINI_API_KEY"); k != "" {
		return k
	}
	return os.Getenv("GOOGLE_API_KEY")
}

// batchSnapshot is what a run driving batch jobs publishes beside its
// database at each job event. bbolt keeps every other process out of a
// file a writer holds, read-only opens included (the writer's flock is
// exclusive), so this is how `batch list|show` see the jobs of a live run.
type batchSnapshot struct {
	PID     int                 `json:"pid"`
	Updated time.Time           `json:"updated"`
	Jobs    []pipeline.BatchJob `json:"jobs"`
}

// batchSnapshotPath is where a run on the database at db publishes its
// batch jobs.
func batchSnapshotPath(db string) string { return db + ".batch.json" }

// publishBatchJobs writes db's job records to its snapshot, atomically.
// A failure only costs `batch list` its view during the run, so it is not
// reported.
func publishBatchJobs(db batchJobReader) {
	if !snapshotted(db.Path()) {
		return
	}
	jobs, err := db.BatchJobs(false)
	if err != nil {
		return
	}
	_ = writeFileAtomic(batchSnapshotPath(db.Path()), func(w io.Writer) error {
		return json.NewEncoder(w).Encode(batchSnapshot{PID: os.Getpid(), Updated: time.Now().UTC(), Jobs: jobs})
	})
}

// liveBatchJobs reads the snapshot of the run driving the database at
// path's batch jobs now; false when no live run published one. Only ask
// it once opening the database failed with store.ErrInUse: a SIGKILLed
// run leaves its snapshot behind, and the pid in it may since belong to
// any other process, so a live pid alone proves nothing.
func liveBatchJobs(path string) (batchSnapshot, bool) {
	b, err := os.ReadFile(batchSnapshotPath(path))
	if err != nil {
		return batchSnapshot{}, false
	}
	var s batchSnapshot
	if json.Unmarshal(b, &s) != nil || !monitor.ProcessAlive(s.PID) {
		return batchSnapshot{}, false
	}
	return s, true
}

// snapshotted reports whether a run on the database at path publishes
// its batch jobs: a bbolt file's run does, holding it exclusively; a
// PostgreSQL database is read by many processes at once.
func snapshotted(path string) bool { return !isPostgres(path) }

// dropLeftoverSnapshot removes the snapshot of a run that died without
// removing it. Call it only while holding the database at path open: a
// run publishes only while it holds the file's exclusive lock, so no
// snapshot can be live then.
func dropLeftoverSnapshot(path string) {
	if snapshotted(path) {
		_ = os.Remove(batchSnapshotPath(path))
	}
}

// readBatchJobs is every job of the database at path: from the database,
// or, while a run holds it, from what the run published (said on errOut).
func readBatchJobs(path string, errOut io.Writer) ([]pipeline.BatchJob, error) {
	db, err := openReadOnly(path)
	if errors.Is(err, store.ErrInUse) {
		if live, ok := liveBatchJobs(path); ok {
			fmt.Fprintf(errOut, "%s is held by a running sawtooth (pid %d): its batch jobs as that run recorded them at %s\n",
				path, live.PID, live.Updated.Local().Format(time.TimeOnly))
			return live.Jobs, nil
		}
	}
	if err != nil {
		return nil, err
	}
	defer db.Close()
	dropLeftoverSnapshot(path)
	bdb, err := batchStore(db)
	if err != nil {
		return nil, err
	}
	return bdb.BatchJobs(false)
}

func runBatchList(opts *batchCmdOptions) error {
	jobs, err := readBatchJobs(opts.DB, opts.ErrOut)
	if err != nil {
		return err
	}
	if opts.JSON {
		return monitor.WriteJSONSafe(opts.Out, jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(opts.Out, "no batch jobs in %s (run with --mode batch or auto to create them)\n", opts.DB)
		return nil
	}
	return batch.WriteJobs(opts.Out, jobs, time.Now())
}

func runBatchShow(opts *batchCmdOptions) error {
	jobs, err := readBatchJobs(opts.DB, opts.ErrOut)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j.Num == opts.Job {
			return monitor.WriteJSONSafe(opts.Out, j)
		}
	}
	return fmt.Errorf("batch job %d: %w (see `sawtooth batch list --db %s`)", opts.Job, pipeline.ErrNotFound, shellQuote(opts.DB))
}

func runBatchCancel(ctx context.Context, opts *batchCmdOptions) error {
	db, err := openWritable(opts.DB)
	if errors.Is(err, store.ErrInUse) {
		if live, ok := liveBatchJobs(opts.DB); ok {
			return fmt.Errorf("job %d is driven by the running sawtooth (pid %d), which holds %s: it polls the job and collects or closes it itself; to cancel it now, stop that run first (Ctrl-C, or `kill -INT %d`: its jobs stay at the API), then run `sawtooth batch cancel --db %s %d` again; nothing changed",
				opts.Job, live.PID, opts.DB, live.PID, shellQuote(opts.DB), opts.Job)
		}
	}
	if err != nil {
		return err
	}
	defer db.Close()
	dropLeftoverSnapshot(opts.DB)
	bdb, err := batchStore(db)
	if err != nil {
		return err
	}
	job, err := bdb.BatchJobByNum(opts.Job)
	if err != nil {
		return err
	}
	if !job.Open() {
		fmt.Fprintf(opts.ErrOut, "job %d is already closed (%s): nothing to do\n", job.Num, job.Note)
		return nil
	}
	baseURL, from := jobEndpoint(job, opts.BaseURL)
	c, err := batch.NewClient(ctx, opts.APIKey, baseURL)
	if err != nil {
		return usage(fmt.Errorf("%w (needed to cancel job %d at the API)", err, job.Num))
	}
	endpoint := c.ClientConfig().HTTPOptions.BaseURL
	fmt.Fprintf(opts.ErrOut, "job %d: asking %s (%s)\n", job.Num, endpoint, from)
	stage, err := storedStage(ctx, bdb, job.Stage, opts.APIKey, baseURL)
	if err != nil {
		return err
	}
	res, err := batch.Cancel(ctx, c, bdb, job.Num, batch.CancelConfig{Stage: stage.stage, Price: stage.price, MaxSends: stage.maxSends, CreateSettle: opts.Settle})
	path, name := shellQuote(opts.DB), orDash(res.Job.Name)
	switch {
	case errors.Is(err, batch.ErrSucceeded):
		return fmt.Errorf("job %d (%s) SUCCEEDED at the API: its answers are paid for, but %s does not record the %s settings needed to read them here; nothing changed: collect them with `sawtooth run --db %s --mode batch`",
			job.Num, name, opts.DB, job.Stage, path)
	case errors.Is(err, batch.ErrUnknownJob):
		return fmt.Errorf("job %d: the API at %s does not know %s; nothing changed: if the job was created at another endpoint, give it with --base-url; if it was deleted there, `sawtooth run --db %s --mode batch` closes it and sends its items again",
			job.Num, endpoint, name, path)
	case err != nil:
		return fmt.Errorf("job %d: %w", job.Num, err)
	}
	back := plural(res.Returned, "item")
	switch {
	case res.Collected:
		fmt.Fprintf(opts.ErrOut, "job %d (%s) had already SUCCEEDED at the API, so it was not cancelled: its results were collected: %d answered, %d dead letters, %s with no result back in the %s queue\n",
			job.Num, name, res.Answered, res.Dead, back, job.Stage)
	case !res.Created && res.Unconfirmed:
		sent := fmt.Sprintf("its create was sent %s ago", time.Since(res.Job.CreateSent).Round(time.Second))
		if res.Job.CreateSent.IsZero() {
			sent = fmt.Sprintf("it was recorded %s ago by a sawtooth that did not record when its create was sent", time.Since(res.Job.Created).Round(time.Second))
		}
		return fmt.Errorf("the API lists no job named %s (job %d) yet, but %s and a create the server finishes late shows up only later, so its %s stay with it: run `sawtooth batch cancel --db %s %d` again after %s: %w",
			job.DisplayName, job.Num, sent, plural(len(job.Items), "item"), path, job.Num, res.RetryAt.Local().Format(time.TimeOnly), pipeline.ErrStopped)
	case !res.Created:
		fmt.Fprintf(opts.ErrOut, "job %d was never created at the API: %s back in the %s queue\n", job.Num, back, job.Stage)
	case res.Unconfirmed:
		held := len(res.Job.Items) - res.Job.Answered - res.Job.Dead
		return fmt.Errorf("asked the API to cancel job %d (%s); it still reports %s, so its %s stay with the job (if it still succeeds, its answers are collected, not paid again): run `sawtooth batch cancel --db %s %d` again in a minute: %w",
			job.Num, name, strings.TrimPrefix(string(res.State), "JOB_STATE_"), plural(held, "item"), path, job.Num, pipeline.ErrStopped)
	default:
		fmt.Fprintf(opts.ErrOut, "cancelled job %d (%s): the API reports it %s with no results; %s back in the %s queue\n",
			job.Num, name, strings.TrimPrefix(string(res.State), "JOB_STATE_"), back, job.Stage)
	}
	return nil
}

// jobEndpoint is the API root URL to ask about job, and where it came
// from: --base-url, else the endpoint the job was created at, else ""
// (batch.NewClient then takes $GOOGLE_GEMINI_BASE_URL, else Google's).
func jobEndpoint(job pipeline.BatchJob, flag string) (url, from string) {
	switch {
	case flag != "":
		return flag, "--base-url"
	case job.Endpoint != "":
		return job.Endpoint, "where the job was created"
	case os.Getenv("GOOGLE_GEMINI_BASE_URL") != "":
		return "", "$GOOGLE_GEMINI_BASE_URL; the job's endpoint was not recorded"
	}
	return "", "Google's endpoint; the job's endpoint was not recorded, give it with --base-url if it was elsewhere"
}

// storedStage is the stage a job's results are decoded with, built from
// what the run recorded in db, as the run built it: the stage of the job
// db stores (any LLM stage), else classify from its recorded settings;
// nil when neither is recorded (batch.Cancel then refuses a SUCCEEDED
// job rather than guess).
func storedStage(ctx context.Context, db pipeline.Database, stage, apiKey, baseURL string) (decoding, error) {
	if s, err := storedJobStage(ctx, db, stage, apiKey, baseURL); s.stage != nil || err != nil {
		return s, err
	}
	defs, err := db.StoredDefinition()
	if err != nil {
		return decoding{}, err
	}
	var cs classifySettings
	raw := storedSettings(defs)[stage]
	if stage != "classify" || len(raw) == 0 || json.Unmarshal(raw, &cs) != nil || cs.Model == "" {
		return decoding{}, nil
	}
	cl, err := stages.NewClassify(ctx, stages.ClassifyConfig{APIKey: apiKey, BaseURL: baseURL, Model: cs.Model, Labels: cs.Labels,
		PromptTemplate: cs.Prompt, MaxOutputTokens: cs.MaxOutputTokens})
	if err != nil {
		return decoding{}, fmt.Errorf("the %s settings recorded in %s: %w", stage, db.Path(), err)
	}
	return decoding{stage: cl}, nil
}

// decoding is how `batch cancel` reads a job's answers as the run would:
// the stage, its price and its bound on sends (zero: the list price and
// the default bound).
type decoding struct {
	stage    batch.Stage
	price    pipeline.Price
	maxSends int
}

// storedJobStage is stage as the job db stores builds it; no stage when
// db stores no job, or one without that LLM stage.
func storedJobStage(ctx context.Context, db pipeline.Database, stage, apiKey, baseURL string) (decoding, error) {
	jdb, ok := db.(jobDatabase)
	if !ok {
		return decoding{}, nil
	}
	raw, err := jdb.Job()
	if err != nil || raw == nil {
		return decoding{}, err
	}
	st, err := job.UnmarshalStored(raw)
	if err != nil {
		return decoding{}, nil // damaged: the recorded settings may still do
	}
	j, err := storedJobOf(db.Path(), &st)
	if err != nil {
		return decoding{}, nil
	}
	if baseURL != "" {
		j.BaseURL = baseURL
	}
	b, err := buildJob(ctx, j, buildOptions{APIKey: apiKey})
	if err != nil {
		// Its files moved, say: a job still running is cancelled all
		// the same, and one that succeeded is left to a run.
		return decoding{}, nil
	}
	for _, sc := range b.stages {
		if bs, ok := sc.Stage.(batch.Stage); ok && sc.Stage.Name() == stage {
			dec := decoding{stage: bs, price: b.prices[stage], maxSends: batch.DefaultMaxSends}
			for _, s := range b.batched {
				if s.stage.Name() == stage {
					dec.maxSends = s.options(defaultBatchOptions()).MaxSends
				}
			}
			return dec, nil
		}
	}
	return decoding{}, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// batchStatus is the batch section of `status`: every job's totals,
// and each stage's that has jobs (a job may run several LLM stages
// through batch jobs, each on its own model).
type batchStatus struct {
	batch.Totals
	// Model is the one stage's model, when one stage has jobs.
	Model  string             `json:"model,omitempty"`
	Stages []stageBatchStatus `json:"stages"`
}

// stageBatchStatus is one stage's batch jobs.
type stageBatchStatus struct {
	Stage string `json:"stage"`
	Model string `json:"model,omitempty"`
	batch.Totals
}

// readBatchStatus sums the DB's jobs, priced per stage as the run prices
// them (storedPrices), else at the list price of the stage's model; nil
// when it has none.
func readBatchStatus(db batchJobReader) (*batchStatus, error) {
	jobs, err := db.BatchJobs(false)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	defs, err := db.StoredDefinition()
	if err != nil {
		defs = nil // priced at zero: the jobs still count
	}
	settings := storedSettings(defs)
	byStage := map[string][]pipeline.BatchJob{}
	var order []string
	for _, j := range jobs {
		if byStage[j.Stage] == nil {
			order = append(order, j.Stage)
		}
		byStage[j.Stage] = append(byStage[j.Stage], j)
	}
	prices := storedPrices(db)
	bs := &batchStatus{}
	for _, stage := range order {
		st := stageBatchStatus{Stage: stage, Model: storedModel(settings[stage]), Totals: batch.Total(byStage[stage], storedModel(settings[stage]))}
		if p := prices[stage]; !p.IsZero() {
			// as the run's driver prices its jobs (batch.Config.Price)
			st.OnlineCostUSD = p.Cost(st.Usage)
			st.CostUSD = st.OnlineCostUSD * stages.BatchPriceFactor
			st.SavedUSD = st.OnlineCostUSD - st.CostUSD
		}
		bs.Stages = append(bs.Stages, st)
		bs.Totals = bs.Totals.Add(st.Totals)
	}
	if len(bs.Stages) == 1 {
		bs.Model = bs.Stages[0].Model
	}
	return bs, nil
}

// storedPrices are the online prices of the LLM stages of the job db
// stores, as a run of it prices them: the job's price: (a run from flags
// records --price-in/--price-out there), else the list price with its
// cached-input rate. Empty when db stores no job it can read.
func storedPrices(db batchJobReader) map[string]pipeline.Price {
	jdb, ok := db.(interface{ Job() ([]byte, error) })
	if !ok {
		return nil
	}
	raw, err := jdb.Job()
	if err != nil {
		return nil
	}
	prices := map[string]pipeline.Price{}
	for name, pc := range job.StoredPrices(raw, db.Path()) {
		if p, err := stages.StagePrice(pc, false); err == nil {
			prices[name] = p
		}
	}
	return prices
}

// storedModel is the model of an LLM stage from its stored settings:
// a run from flags records its classify settings, a job the stage as
// the job file gives it (no model: the default).
func storedModel(raw json.RawMessage) string {
	var s struct {
		Model string
		LLM   *struct{ Model string }
	}
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	if s.LLM != nil {
		return orStr(s.LLM.Model, job.DefaultModel)
	}
	return s.Model
}

// printStatusWithBatch is monitor.PrintStatus plus the batch jobs.
func printStatusWithBatch(w io.Writer, pdb pipeline.Database, v monitor.StatusView, asJSON bool) error {
	db, ok := pdb.(batchJobReader)
	if !ok {
		return monitor.PrintStatus(w, v, asJSON)
	}
	bs, err := readBatchStatus(db)
	if err != nil {
		return err
	}
	if asJSON {
		return monitor.WriteJSONSafe(w, struct {
			monitor.StatusView
			Batch *batchStatus `json:"batch,omitempty"`
		}{v, bs})
	}
	if err := monitor.PrintStatus(w, v, false); err != nil || bs == nil {
		return err
	}
	fmt.Fprintf(w, "\nbatch jobs: %d (%d open, holding %s); %d answered, %d dead, %d returned to the queue, %d late results ignored\n",
		bs.Jobs, bs.Open, plural(bs.Held, "item"), bs.Answered, bs.Dead, bs.Returned, bs.Ignored)
	fmt.Fprintf(w, "batch tokens: %d in, %d out; cost $%.4f at the batch price (online $%.4f: saved $%.4f)\n",
		bs.Usage.PromptTokens, bs.Usage.CandidateTokens, bs.CostUSD, bs.OnlineCostUSD, bs.SavedUSD)
	if len(bs.Stages) > 1 {
		for _, st := range bs.Stages {
			fmt.Fprintf(w, "  %s: %d jobs (%d open, holding %s); %d answered, %d dead, %d returned; cost $%.4f\n",
				st.Stage, st.Jobs, st.Open, plural(st.Held, "item"), st.Answered, st.Dead, st.Returned, st.CostUSD)
		}
	}
	fmt.Fprintf(w, "  sawtooth batch list --db %s\n", shellQuote(db.Path()))
	return nil
}

// batchJobReader is a database whose batch jobs status and `batch list`
// read.
type batchJobReader interface {
	BatchJobs(openOnly bool) ([]pipeline.BatchJob, error)
	StoredDefinition() ([]pipeline.StageDef, error)
	Path() string
}

// batchDB is a database that keeps batch jobs (the bbolt and the
// PostgreSQL store): what a batch phase and `batch cancel` need.
type batchDB interface {
	pipeline.Database
	batch.Store
	// SetBatchEndpoint records the API root URL the jobs reserved from
	// now on are created at.
	SetBatchEndpoint(url string) error
}

// batchStore is db as a keeper of batch jobs.
func batchStore(db pipeline.Database) (batchDB, error) {
	if b, ok := db.(batchDB); ok {
		return b, nil
	}
	return nil, usagef("--db %s: this database does not keep Batch API jobs: run online (--mode online)", db.Path())
}
