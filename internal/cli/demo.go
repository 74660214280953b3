package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sawtooth-dev/sawtooth/bench"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/urfave/cli/v2"
)

// demoSim is the demo's quota: a 1 s window standing in for a minute, 60
// requests per window, halving for 15 s in the middle: a fixed 64-way pool
// overruns it several times over, so AIMD has something to find.
var demoSim = simOptions{
	RPM: 60, TPM: 1_000_000, Window: time.Second, Day: 24 * time.Hour,
	Schedule: "0s:100,15s:50,30s:100",
	Latency:  250 * time.Millisecond, PerToken: 200 * time.Microsecond, Jitter: 250 * time.Millisecond,
	F500: 0.005, F503: 0.01, Hang: 0.002, Malform: 0.002, BlockCand: 0.002, MT: 0.002, Seed: 1,
	// With --mode batch or auto: the first job succeeds after 15 s, the
	// second is stuck until the demo's 30 s deadline cancels it.
	Batch: simBatchOptions{Pending: 5 * time.Second, Running: 10 * time.Second, Fates: "succeed,stuck", Shuffle: true},
	// With --tier flex or auto: flex answers in 1-15 s (the real tier's
	// minutes, on the demo's second-for-a-minute scale) and sheds a fifth
	// of its calls.
	FlexLatency: time.Second, FlexJitter: 14 * time.Second, FlexShed: 0.2,
}

// demoFlex are the demo's flex settings on its time scale: auto's
// deadline (30 minutes on the real API) and one flex call's timeout.
var demoFlex = struct{ Deadline, Timeout time.Duration }{Deadline: 30 * time.Second, Timeout: 30 * time.Second}

// demoBatch are the demo's batch settings unless given: a deadline of
// seconds instead of hours, and polls to match.
var demoBatch = batchOptions{Deadline: 30 * time.Second, Poll: time.Second}

// demoOptions are `sawtooth demo`'s.
type demoOptions struct {
	Pipeline pipelineOptions
	Obs      monitor.Options
	Sim      simOptions
	Batch    batchOptions
	// Items is how many of Reviews to drain.
	Items int
	// DB is the database; empty means a new temporary file.
	DB string
	// Reviews is the JSONL input (the bundled reviews).
	Reviews []byte
	// TimeoutSet says --timeout was given (else the demo shortens it).
	TimeoutSet  bool
	Out, ErrOut io.Writer
	ExitNow     func(error)
}

func newDemoCommand(cfg Config) *cli.Command {
	opts := demoOptions{Reviews: cfg.DemoReviews}
	flags := []cli.Flag{
		&cli.IntFlag{Category: catDemo, Name: "items", Value: 3000, Usage: "how many of the bundled reviews to process", Destination: &opts.Items},
		&cli.StringFlag{Category: catDemo, Name: "db", Usage: "database `FILE`; run again with the same --db to resume", DefaultText: "a new temporary file", Destination: &opts.DB},
	}
	flags = append(flags, simFlags(&opts.Sim, demoSim)...)
	flags = append(flags, pipelineFlags(&opts.Pipeline)...)
	flags = append(flags, rerunFlags(&opts.Pipeline, false)...)
	flags = append(flags, obsFlags(&opts.Obs)...)
	flags = append(flags, batchFlags(&opts.Batch)...)
	return &cli.Command{
		Name:   "demo",
		Usage:  "run the whole pipeline on bundled reviews against the built-in Gemini simulator",
		Flags:  flags,
		Before: before(),
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.TimeoutSet = c.IsSet("timeout")
			if opts.Pipeline.Tier == stages.TierAuto && !c.IsSet("flex-deadline") {
				opts.Pipeline.FlexDeadline = demoFlex.Deadline
			}
			if !c.IsSet("batch-deadline") {
				opts.Batch.Deadline = demoBatch.Deadline
			}
			if !c.IsSet("batch-poll") {
				opts.Batch.Poll = demoBatch.Poll
			}
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			opts.Pipeline.Confirm = cfg.Confirm
			return runDemo(c.Context, &opts)
		},
	}
}

// runDemo serves the simulator in-process and drains the bundled reviews
// against it, then prints the simulator's view of the run.
func runDemo(ctx context.Context, opts *demoOptions) error {
	stderr := opts.ErrOut
	o, so := &opts.Pipeline, &opts.Sim
	dir, err := os.MkdirTemp("", "sawtooth-demo-")
	if err != nil {
		return err
	}
	o.DB = opts.DB
	if o.DB == "" {
		o.DB = filepath.Join(dir, "demo.db") // kept: the user inspects it afterwards
	} else {
		defer os.RemoveAll(dir) // only the input copy is there
	}
	input := filepath.Join(dir, "reviews.jsonl")
	n, err := writeFirstLines(input, opts.Reviews, opts.Items)
	if err != nil {
		return err
	}
	so.Key = geminisim.DefaultAPIKey
	cfg, err := so.config()
	if err != nil {
		return err
	}
	sim := geminisim.New(cfg)
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: start simulator: %w", err)
	}
	defer sim.Close()
	o.BaseURL, o.APIKey = url, cfg.APIKey
	if !opts.TimeoutSet {
		o.Timeout = 5 * time.Second // the simulator's hangs would otherwise hold an item for a minute
		o.flexTimeout = demoFlex.Timeout
	}
	fmt.Fprintf(stderr, "demo: %d reviews, simulator at %s: %d requests per %s window (a fixed 64-way pool overruns it), schedule %s, faults on\n",
		n, url, so.RPM, so.Window, so.Schedule)
	fmt.Fprintf(stderr, "demo: database %s\n", o.DB)

	start := time.Now()
	sum, runErr := drain(ctx, drainRequest{Pipeline: o, Input: inputOptions{Path: input, IDField: "id", TextField: "text"}, Obs: opts.Obs, Batch: opts.Batch,
		Out: opts.Out, ErrOut: stderr, ExitNow: opts.ExitNow})
	wall := time.Since(start)

	st := sim.Stats()
	w := opts.Out
	fmt.Fprintf(w, "\nsimulator: %d calls: %d ok, %d rate-limited (%.2f%%), %d 500, %d 503, %d hung, %d malformed, %d blocked, %d cut off\n",
		st.Calls, st.Outcomes[geminisim.OutcomeOK], st.Outcomes[geminisim.OutcomeRateLimited],
		100*float64(st.Outcomes[geminisim.OutcomeRateLimited])/float64(max(st.Calls, 1)),
		st.Outcomes[geminisim.OutcomeErr500], st.Outcomes[geminisim.OutcomeErr503], st.Outcomes[geminisim.OutcomeHang],
		st.Outcomes[geminisim.OutcomeMalformed], st.Outcomes[geminisim.OutcomeBlockPrompt]+st.Outcomes[geminisim.OutcomeBlockCandidate],
		st.Outcomes[geminisim.OutcomeMaxTokens])
	// Several reviews can share a text, so count by items, not by the
	// simulator's per-text accounting: an item classified without a
	// cached answer took one answer; every answer beyond that was paid
	// twice.
	var classified, cached int64
	if cs := sum.Stages["classify"]; cs != nil {
		classified, cached = cs.Done, cs.Cached
	}
	fmt.Fprintf(w, "simulator: %d answers for %d newly classified items (%d of them reused a cached answer): %d paid twice; peak %d requests in flight\n",
		st.Outcomes[geminisim.OutcomeOK], classified, cached, st.Outcomes[geminisim.OutcomeOK]-(classified-cached), st.PeakInFlight)
	printDemoBatch(w, sim)
	if minimum, ok := bench.Minimum(cfg, st.AdmittedRequests); ok && minimum > 0 {
		fmt.Fprintf(w, "wall time %s against the quota's minimum %s for %d admitted calls (%.0f%% of the physical limit)\n",
			wall.Round(100*time.Millisecond), minimum.Round(100*time.Millisecond), st.AdmittedRequests, 100*minimum.Seconds()/wall.Seconds())
	}
	if runErr == nil && (o.Tier == stages.TierFlex || o.Tier == stages.TierAuto) {
		return demoStandard(ctx, opts, cfg, dir, input, sum, wall)
	}
	return runErr
}

// demoStandard drains the same reviews again on the standard tier, into
// a database of its own against a simulator of its own (same quota and
// faults), and prints its cost beside the tier run's.
func demoStandard(ctx context.Context, opts *demoOptions, cfg geminisim.Config, dir, input string, tierRun pipeline.RunSummary, tierWall time.Duration) error {
	o := opts.Pipeline // a copy: the tier run's options stay as they were
	o.Tier, o.FlexDeadline, o.Quiet = stages.TierStandard, 0, true
	o.DB = filepath.Join(dir, "standard.db")
	os.Remove(o.DB) // a demo run again with the same --db compares afresh
	sim := geminisim.New(cfg)
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: start simulator: %w", err)
	}
	defer sim.Close()
	o.BaseURL = url
	fmt.Fprintf(opts.ErrOut, "demo: now the same reviews on the standard tier, to compare the prices (database %s)\n", o.DB)
	start := time.Now()
	std, err := drain(ctx, drainRequest{Pipeline: &o, Input: inputOptions{Path: input, IDField: "id", TextField: "text"}, Obs: opts.Obs,
		Out: io.Discard, ErrOut: io.Discard, ExitNow: opts.ExitNow})
	if err != nil {
		return fmt.Errorf("demo: the standard run for comparison: %w", err)
	}
	printDemoPrices(opts.Out, opts.Pipeline.Tier, tierRun, tierWall, std, time.Since(start))
	return nil
}

// printDemoPrices prints the tier run's cost beside the standard run's.
func printDemoPrices(w io.Writer, tier string, tierRun pipeline.RunSummary, tierWall time.Duration, std pipeline.RunSummary, stdWall time.Duration) {
	t, s := tierRun.Totals(), std.Totals()
	fmt.Fprintf(w, "\nprice of the same reviews: standard $%.4f (%d calls, %s); %s $%.4f (%d calls, %s)",
		s.CostUSD, s.Paid, stdWall.Round(100*time.Millisecond), tier, t.CostUSD, t.Paid, tierWall.Round(100*time.Millisecond))
	if s.CostUSD > 0 {
		fmt.Fprintf(w, ": %.0f%% of standard, $%.4f saved", 100*t.CostUSD/s.CostUSD, s.CostUSD-t.CostUSD)
	}
	fmt.Fprintln(w)
	for _, name := range []string{stages.TierFlex, stages.TierStandard} {
		if ts := t.Tiers[name]; ts != nil && ts.Calls > 0 {
			fmt.Fprintf(w, "  %s run, on %s: %d calls, $%.4f, latency p50 %s p95 %s\n", tier, name, ts.Calls, ts.CostUSD,
				monitor.Latency(ts.P50Seconds), monitor.Latency(ts.P95Seconds))
		}
	}
}

// writeFirstLines writes the first n lines of data to path and returns how
// many it wrote.
func writeFirstLines(path string, data []byte, n int) (int, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	bw := bufio.NewWriter(f)
	count := 0
	for count < n && sc.Scan() {
		bw.Write(sc.Bytes())
		bw.WriteByte('\n')
		count++
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		return count, err
	}
	return count, bw.Flush()
}
