package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/urfave/cli/v2"
)

const catBatch = "Batch API"

// batchOptions choose how the classify stage is run: online calls, Gemini
// batch jobs at half the price, or batch jobs first and online calls for
// what they did not answer by the deadline.
type batchOptions struct {
	Mode        string
	Size        int
	Deadline    time.Duration
	Poll        time.Duration
	InlineBytes int
	Settle      time.Duration
	MaxSends    int
}

func batchFlags(o *batchOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Category: catBatch, Name: "mode", Value: string(batch.ModeOnline), Usage: "how classify is run: online (one call per item), batch (Gemini batch jobs, half the price, results within the deadline) or auto (batch jobs, then online calls for what they did not answer by --batch-deadline)", Destination: &o.Mode},
		&cli.IntFlag{Category: catBatch, Name: "batch-size", Value: batch.DefaultSize, Usage: "most requests per batch job (jobs over 19 MB go as an uploaded file)", Destination: &o.Size},
		&cli.DurationFlag{Category: catBatch, Name: "batch-deadline", Value: batch.DefaultDeadline, Usage: "a job still pending or running this long after create is cancelled and its items go back to the queue (the API expires jobs at 48h); in auto mode the whole batch phase's: no job is created past it and what is left goes online", Destination: &o.Deadline},
		&cli.DurationFlag{Category: catBatch, Name: "batch-poll", Value: batch.DefaultPoll, Usage: "first interval between polls of a job; it doubles up to 10m", Destination: &o.Poll},
		&cli.DurationFlag{Category: catBatch, Name: "batch-create-settle", Value: batch.DefaultCreateSettle, Hidden: true, Usage: "after a create whose answer was lost (or a run killed while it was in flight), how long the job may take to show in the API's list: it is looked for until then before being created again", Destination: &o.Settle},
		&cli.IntFlag{Category: catBatch, Name: "batch-max-sends", Value: batch.DefaultMaxSends, Usage: "most batch jobs that may ask for one item at a stage, over every round, run and worker: an item whose answers never commit (cut off every time, say) then goes to the stage's dead letters instead of being paid for again (dlq requeue gives it as many more)", Destination: &o.MaxSends},
		&cli.IntFlag{Category: catBatch, Name: "batch-inline-bytes", Value: batch.DefaultInlineBytes, Hidden: true, Usage: "largest job sent inlined; bigger ones are uploaded as a JSONL file", Destination: &o.InlineBytes},
	}
}

// batchOptions are how the job's first batched stage runs (batch or
// auto, and its batch jobs' size, deadline and poll), the defaults for
// what the job leaves out; online when no stage asks for batch jobs.
// Each batched stage runs with its own (batchedStage.options).
func (b *jobStages) batchOptions() batchOptions {
	bo := defaultBatchOptions()
	if len(b.batched) == 0 {
		return bo
	}
	return b.batched[0].options(bo)
}

func defaultBatchOptions() batchOptions {
	return batchOptions{Mode: string(batch.ModeOnline), Size: batch.DefaultSize, Deadline: batch.DefaultDeadline, Poll: batch.DefaultPoll,
		InlineBytes: batch.DefaultInlineBytes, Settle: batch.DefaultCreateSettle, MaxSends: batch.DefaultMaxSends}
}

// batchedStage is an LLM stage whose mode is batch or auto: it has batch
// jobs of its own.
type batchedStage struct {
	stage batch.Stage
	llm   *job.LLM
}

// options are how s's batch jobs run: its mode and batch block, with
// run's for what the stage leaves out (a run from flags compiles them
// into its one stage; the settings no job key holds come from run).
func (s batchedStage) options(run batchOptions) batchOptions {
	bo := run
	bo.Mode = orStr(s.llm.Mode, bo.Mode)
	if l := s.llm.Batch; l != nil {
		bo.Size = orInt(l.Size, bo.Size)
		bo.Deadline = orDuration(l.Deadline, bo.Deadline)
		bo.Poll = orDuration(l.Poll, bo.Poll)
		bo.InlineBytes = orInt(l.InlineBytes, bo.InlineBytes)
		if l.CreateSettle != "" {
			bo.Settle = job.Duration(l.CreateSettle)
		}
		bo.MaxSends = orInt(l.MaxSends, bo.MaxSends)
	}
	return bo
}

// asksForBatch reports whether the flags bad, refused beside a job, ask
// for batch jobs: --mode other than online, or a --batch-* flag.
func asksForBatch(c *cli.Context, bad []string) bool {
	for _, f := range bad {
		if strings.HasPrefix(f, "--batch-") || f == "--mode" && !strings.EqualFold(strings.TrimSpace(c.String("mode")), string(batch.ModeOnline)) {
			return true
		}
	}
	return false
}

// refuseBatchFlagsOnline refuses --batch-* flags on a run from flags that
// goes online: they set nothing there, and a flag naming the pipeline
// makes the run defined by its flags, so `run --db F --batch-poll 1m` on
// a database a batch run started went online (--mode's default) and paid
// twice the batch price.
func refuseBatchFlagsOnline(c *cli.Context) error {
	if m, err := batch.ParseMode(c.String("mode")); err != nil || m != batch.ModeOnline {
		return nil
	}
	var set []string
	for _, f := range c.Command.Flags {
		if name := f.Names()[0]; strings.HasPrefix(name, "batch-") && c.IsSet(name) {
			set = append(set, "--"+name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	how := "--mode online"
	if !c.IsSet("mode") {
		how += ", the default"
	}
	return usagef("%s: batch settings, but this run calls the API online (%s): give --mode batch or --mode auto with them, or leave them out", strings.Join(set, ", "), how)
}

// refuseSilentOnline refuses a run from flags that names the pipeline but
// not --mode on a database whose stored job runs classify in batch or
// auto mode: the flags define the run and --mode's default is online, so
// `run --db F --rpm 100` went online at twice the batch price, saying
// only "classify.mode: batch -> (none)".
func refuseSilentOnline(c *cli.Context, db string) error {
	if c.IsSet("mode") || db == "" {
		return nil
	}
	st, err := loadStored(db)
	if err != nil || st == nil || !st.Flags {
		return nil // the run's own open reports a database it cannot read
	}
	j, err := st.Job(db)
	if err != nil {
		return nil
	}
	l := classifyOf(j)
	if l == nil || l.Mode == "" || strings.EqualFold(l.Mode, string(batch.ModeOnline)) {
		return nil
	}
	return usagef("%s runs classify with --mode %s (batch jobs, half the price), and this run's flags would call it online (--mode online, the default): give --mode %s to keep it, or --mode online to switch",
		db, l.Mode, l.Mode)
}

// check validates the options before anything is opened.
func (o batchOptions) check() (batch.Mode, error) {
	if o.Mode == "" {
		return batch.ModeOnline, nil // retry, rerun
	}
	m, err := batch.ParseMode(o.Mode)
	if err != nil {
		return "", usagef("--mode: %v", err)
	}
	if m != batch.ModeOnline && (o.Size <= 0 || o.Deadline <= 0 || o.Poll <= 0) {
		return "", usagef("--batch-size, --batch-deadline and --batch-poll must be positive")
	}
	if m != batch.ModeOnline && o.MaxSends < 0 {
		return "", usagef("--batch-max-sends %d: use a positive number of batch jobs per item (default %d)", o.MaxSends, batch.DefaultMaxSends)
	}
	if m != batch.ModeOnline && o.Settle < 0 {
		return "", usagef("--batch-create-settle %s: use a positive duration (default %s)", o.Settle, batch.DefaultCreateSettle)
	}
	return m, nil
}

// simBatchOptions configure the simulator's Batch API.
type simBatchOptions struct {
	Pending, Running, Expire time.Duration
	Fates                    string
	Shuffle                  bool
	RowErrors                float64
	MaxJobs, MaxTokens       int
	CreateDelay              time.Duration
}

func simBatchFlags(o *simBatchOptions, d simBatchOptions) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Category: catSim, Name: "batch-pending", Value: d.Pending, Usage: "simulator: time a batch job spends PENDING", Destination: &o.Pending},
		&cli.DurationFlag{Category: catSim, Name: "batch-running", Value: d.Running, Usage: "simulator: time a batch job spends RUNNING before it ends", Destination: &o.Running},
		&cli.DurationFlag{Category: catSim, Name: "batch-expire", Value: d.Expire, Usage: "simulator: a batch job not ended this long after create is EXPIRED (0 = 48h)", Destination: &o.Expire},
		&cli.StringFlag{Category: catSim, Name: "batch-fates", Value: d.Fates, Usage: "simulator: how the first batch jobs end, in creation order, e.g. succeed,stuck,expire,fail,rows_fail (later ones succeed)", Destination: &o.Fates},
		&cli.BoolFlag{Category: catSim, Name: "batch-shuffle", Value: d.Shuffle, Usage: "simulator: return batch results out of order", Destination: &o.Shuffle},
		&cli.Float64Flag{Category: catSim, Name: "batch-row-errors", Value: d.RowErrors, Usage: "simulator: rate of batch requests answered with an error status", Destination: &o.RowErrors},
		&cli.IntFlag{Category: catSim, Name: "batch-max-jobs", Value: d.MaxJobs, Usage: "simulator: 429 on create past this many live batch jobs (0 = unlimited)", Destination: &o.MaxJobs},
		&cli.IntFlag{Category: catSim, Name: "batch-max-tokens", Value: d.MaxTokens, Usage: "simulator: 429 on create past this many enqueued tokens (0 = unlimited)", Destination: &o.MaxTokens},
		&cli.DurationFlag{Category: catSim, Name: "batch-create-delay", Value: d.CreateDelay, Usage: "simulator: a created batch job shows in the list only this long after create (a create finished late)", Destination: &o.CreateDelay},
	}
}

func (o simBatchOptions) config() (geminisim.BatchConfig, error) {
	fates, err := geminisim.ParseFates(o.Fates)
	if err != nil {
		return geminisim.BatchConfig{}, usagef("--batch-fates: %v", err)
	}
	return geminisim.BatchConfig{
		Pending: o.Pending, Running: o.Running, Expire: o.Expire, Fates: fates, Shuffle: o.Shuffle,
		RowErrors: o.RowErrors, MaxJobs: o.MaxJobs, MaxEnqueuedTokens: o.MaxTokens, CreateDelay: o.CreateDelay,
	}, nil
}

// printDemoBatch is the simulator's view of the batch jobs, when there
// were any.
func printDemoBatch(w io.Writer, sim *geminisim.Server) {
	bs := sim.BatchStats()
	if bs.Created == 0 && bs.Refused == 0 {
		return
	}
	twice := 0
	for _, n := range bs.ByDisplayName {
		if n > 1 {
			twice++
		}
	}
	fmt.Fprintf(w, "simulator: %d batch jobs created (%d created twice), %d creates refused (429), %d cancelled; %d batch requests answered (%d error rows), %d tokens billed at the batch price\n",
		bs.Created, twice, bs.Refused, bs.Cancels, bs.Rows, bs.RowErrors, bs.BilledTokens)
}
