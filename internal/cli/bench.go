package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/bench"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/urfave/cli/v2"
)

// benchOptions configure `sawtooth bench`.
type benchOptions struct {
	Items      int
	Strategies string
	JSON       bool
	Plot       string
	Refusal    time.Duration
	Model      string
	Sim        simOptions
	// ScheduleSet says --quota-schedule was given (else it is computed
	// from Items).
	ScheduleSet bool
	Out, ErrOut io.Writer
	// Matrix runs every strategy on every quota shape (Long adds the
	// shapes whose calls take seconds); Runs per cell, Shapes to pick, PlotDir for SVGs.
	// ItemsSet says --items was given (else the matrix picks per shape).
	ItemsSet bool
	// WorkersSet says --workers was given (it applies to --engine --db).
	WorkersSet bool
	Matrix     bool
	Long       bool
	Unnamed    bool
	Runs       int
	Shapes     string
	PlotDir    string
	// Random, with Matrix, draws that many shapes from the random quota
	// families and runs the law on them in virtual time; Sim.Seed
	// (--seed) draws them.
	Random int
	// Engine measures the engine itself (an instant stand-in for
	// classify) on PostgreSQL (DB, with each of Workers) and bbolt
	// (WithBolt, or without DB).
	Engine   bool
	DB       string
	Workers  string
	WithBolt bool
}

// benchSim is the benchmark's simulator: bench.DefaultConfig's quota and
// latency, no faults. The schedule is left empty: unless --quota-schedule
// is given it is computed from --items (bench.HalfForAThird).
var benchSim = simOptions{
	RPM: bench.DefaultRPM, Window: bench.DefaultWindow, Day: 24 * time.Hour,
	Latency: bench.DefaultLatency, Jitter: bench.DefaultJitter, Seed: 1,
}

func newBenchCommand() *cli.Command {
	var o benchOptions
	names := make([]string, 0, 5)
	for _, s := range bench.Strategies() {
		names = append(names, s.Name)
	}
	flags := []cli.Flag{
		&cli.IntFlag{Category: catBench, Name: "items", Value: bench.DefaultItems, Usage: "reviews each strategy drains", Destination: &o.Items},
		&cli.StringFlag{Category: catBench, Name: "strategies", Value: strings.Join(names, ","), Usage: "comma-separated strategies to run, in order", Destination: &o.Strategies},
		&cli.BoolFlag{Category: catBench, Name: "json", Usage: "print the configuration and results (with the concurrency series) as JSON", Destination: &o.JSON},
		&cli.StringFlag{Category: catBench, Name: "plot", Usage: "write the concurrency of every strategy over time to `FILE` (SVG)", Destination: &o.Plot},
		&cli.DurationFlag{Category: catBench, Name: "refusal-latency", Value: bench.DefaultRefusalLatency, Usage: "network round trip added to every 429 (the simulator refuses at once)", Destination: &o.Refusal},
		&cli.StringFlag{Category: catBench, Name: "model", Value: stages.DefaultModel, Usage: "model asked", Destination: &o.Model},
		&cli.BoolFlag{Category: catBench, Name: "matrix", Usage: "run every strategy on every quota shape (time-scaled windows) and print one table against a perfect client (each shape sets its own simulator: the simulator flags do not apply)", Destination: &o.Matrix},
		&cli.BoolFlag{Category: catBench, Name: "long", Usage: "with --matrix: add the shapes whose calls take seconds, a thinking model and a real per-minute window (minutes per strategy)", Destination: &o.Long},
		&cli.BoolFlag{Category: catBench, Name: "unnamed", Usage: "with --matrix: every shape's 429s name no budget (QuotaFailure without quotaValue, as proxies and some servers send it), so the controller finds each quota by its refusals alone", Destination: &o.Unnamed},
		&cli.IntFlag{Category: catBench, Name: "runs", Value: 1, Usage: "with --matrix: runs per cell; the table shows medians", Destination: &o.Runs},
		&cli.StringFlag{Category: catBench, Name: "shapes", Usage: "with --matrix: comma-separated shapes to run (default all)", Destination: &o.Shapes},
		&cli.IntFlag{Category: catBench, Name: "random", Usage: "with --matrix: instead of the fixed shapes, draw `N` quota shapes from random families (sliding, fixed, bucket, cap, TPM, per-minute; --seed S draws them, shape i has seed S+i) and run the default law on each in virtual time (seconds, not minutes): p10, median and worst goodput against a perfect client, 429 share, calls per item, the worst shapes with their seeds", Destination: &o.Random},
		&cli.StringFlag{Category: catBench, Name: "plot-dir", Usage: "with --matrix: write one SVG per shape to `DIR`", Destination: &o.PlotDir},
		&cli.BoolFlag{Category: catEngineBench, Name: "engine", Usage: "measure the engine itself: drain --items through sanitize, an instant stand-in for classify (no HTTP) and aggregate, on PostgreSQL (--db) and bbolt", Destination: &o.Engine},
		&cli.StringFlag{Category: catEngineBench, Name: "db", Usage: "with --engine: the PostgreSQL `URL` to measure (each run works in its own new schema and drops it; the password from PGPASSWORD or ~/.pgpass); without it only bbolt is measured, in a temporary file", Destination: &o.DB},
		&cli.StringFlag{Category: catEngineBench, Name: "workers", Value: "1,2,4", Usage: "with --engine --db: comma-separated worker counts, one PostgreSQL run each", Destination: &o.Workers},
		&cli.BoolFlag{Category: catEngineBench, Name: "with-bbolt", Value: true, Usage: "with --engine --db: add the bbolt run for comparison (one worker: one process owns the file)", Destination: &o.WithBolt},
	}
	flags = append(flags, simFlags(&o.Sim, benchSim)...)
	return &cli.Command{
		Name:  "bench",
		Usage: "drain the same items with each concurrency strategy against the built-in simulator and compare (--engine: the engine's own throughput on PostgreSQL and bbolt)",
		Description: `Each strategy gets a fresh simulator and database and drains the same
generated reviews through every stage. Strategies:
` + strategyList() + `
Unless --quota-schedule is given, the quota drops to 50% for the middle
third of an ideal run and comes back. Goodput is the items answered over
the requests the quota could admit during the run (its physical limit).

--engine measures the engine instead of a strategy: --items (default
20,000) generated reviews drained through sanitize, an instant stand-in
for classify (no HTTP, no model) and aggregate by the runner ` + "`run`" + ` uses.
With --db postgres://..., once per --workers count (each worker its own
connection pool and runner, in this process, claiming with leases and
committing fenced, as separate processes would), in a new schema it drops
afterwards; then once on a temporary bbolt file (one worker: one process
owns the file). Each run is checked (every item done, the aggregate
equal to its recomputation) and the table says whether the commits were
durable (the server's fsync, synchronous_commit, full_page_writes). A
throwaway durable server on a Unix socket, from a source checkout:
  url=$(scripts/pgserver.sh start /tmp/pg)   # prints its URL
  sawtooth bench --engine --db "$url"
  scripts/pgserver.sh stop /tmp/pg`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			o.ScheduleSet = c.IsSet("quota-schedule")
			o.ItemsSet = c.IsSet("items")
			o.WorkersSet = c.IsSet("workers")
			if !o.Engine {
				for _, f := range []string{"db", "workers", "with-bbolt"} {
					if c.IsSet(f) {
						return usagef("--%s is for the engine benchmark: add --engine (without it, bench measures the quota strategies against the simulator)", f)
					}
				}
			}
			if !o.Matrix {
				for _, f := range []string{"long", "unnamed", "runs", "shapes", "plot-dir", "random"} {
					if c.IsSet(f) {
						return usagef("--%s is for the quota matrix: add --matrix (without it, bench runs the strategies on one simulator the simulator flags set)", f)
					}
				}
			}
			o.Out, o.ErrOut = c.App.Writer, c.App.ErrWriter
			return runBench(c.Context, &o)
		},
	}
}

// strategyList is one line per strategy, for --help.
func strategyList() string {
	var b strings.Builder
	for _, s := range bench.Strategies() {
		fmt.Fprintf(&b, "  %-12s %s\n", s.Name, s.Description)
	}
	return b.String()
}

// runBench drains the same items with each strategy and prints the
// comparison.
func runBench(ctx context.Context, o *benchOptions) error {
	if o.Items <= 0 {
		return usagef("--items must be positive")
	}
	if o.Engine {
		return runEngineBench(ctx, o)
	}
	strategies, err := bench.Lookup(splitList([]string{o.Strategies}))
	if err != nil {
		return usagef("--strategies: %v", err)
	}
	if o.Matrix && o.Random != 0 {
		if o.Random < 0 {
			return usagef("--random must be positive: the number of quota shapes to draw")
		}
		bench.RunRandom(bench.RandomOptions{Shapes: o.Random, Seed: uint64(o.Sim.Seed), Worst: 10}, o.Out)
		return nil
	}
	if o.Matrix {
		if o.Runs <= 0 {
			return usagef("--runs must be positive")
		}
		if _, err := bench.LookupShapes(splitList([]string{o.Shapes}), o.Long); err != nil {
			return usagef("--shapes: %v", err)
		}
		opts := bench.MatrixOptions{
			Shapes: splitList([]string{o.Shapes}), Long: o.Long, Unnamed: o.Unnamed, Strategies: strategies, Runs: o.Runs,
			RefusalLatency: o.Refusal, JSON: o.JSON, PlotDir: o.PlotDir, Log: o.ErrOut,
		}
		if o.ItemsSet {
			opts.Items = o.Items
		}
		_, err := bench.RunMatrix(ctx, opts, o.Out)
		return err
	}
	sim, err := o.Sim.config()
	if err != nil {
		return err
	}
	if !o.ScheduleSet {
		sim.Schedule = bench.HalfForAThird(o.Items, sim.RPM, sim.Window)
	}
	cfg := bench.DefaultConfig(o.Items)
	cfg.Sim, cfg.RefusalLatency, cfg.Model = sim, o.Refusal, o.Model
	cfg.Log = o.ErrOut
	fmt.Fprintf(o.ErrOut, "bench: %d items per strategy; simulator: %d requests per %s window, schedule %s, latency %s + up to %s, 429s answered after %s\n",
		o.Items, sim.RPM, sim.Window, scheduleString(sim.Schedule), sim.Latency.Base, sim.Latency.Jitter, o.Refusal)

	results, runErr := bench.Run(ctx, cfg, strategies)
	if len(results) == 0 {
		return runErr
	}
	if o.Plot != "" {
		if err := writePlot(o.Plot, cfg, results); err != nil {
			return err
		}
		fmt.Fprintf(o.ErrOut, "bench: plot written to %s\n", o.Plot)
	}
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		rep := benchReport{Config: cfg, Results: results}
		rep.Sim.RPM, rep.Sim.TPM, rep.Sim.Window = sim.RPM, sim.TPM, sim.Window.String()
		rep.Sim.Schedule, rep.Sim.Latency, rep.Sim.Jitter = scheduleString(sim.Schedule), sim.Latency.Base.String(), sim.Latency.Jitter.String()
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printBenchTable(o.Out, results)
	}
	return runErr
}

// benchReport is the --json output.
type benchReport struct {
	Config bench.Config `json:"config"`
	Sim    struct {
		RPM      int    `json:"rpm"`
		TPM      int    `json:"tpm,omitempty"`
		Window   string `json:"window"`
		Schedule string `json:"schedule"`
		Latency  string `json:"latency"`
		Jitter   string `json:"jitter"`
	} `json:"sim"`
	Results []bench.Result `json:"results"`
}

// writePlot writes the SVG plot of results to path.
func writePlot(path string, cfg bench.Config, results []bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := bench.WriteSVG(f, cfg, results); err != nil {
		f.Close()
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return f.Close()
}

// printBenchTable prints one row per strategy.
func printBenchTable(w io.Writer, results []bench.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\twall\tgoodput\t429 share\tconc mean\tconc p5-p95\tcalls/item\tlost\t")
	for _, r := range results {
		name := r.Strategy
		if r.Status != "complete" {
			name += " (" + r.Status + ")"
		}
		fmt.Fprintf(tw, "%s\t%.1fs\t%.1f%%\t%.2f%%\t%.1f\t%d-%d\t%.3f\t%d\t\n",
			name, r.Wall.Seconds(), 100*r.Goodput, 100*r.Share429, r.ConcMean, r.ConcP5, r.ConcP95, r.CallsPerItem, r.Lost)
	}
	tw.Flush()
}

// scheduleString is steps as --quota-schedule takes them.
func scheduleString(steps []geminisim.Step) string {
	if len(steps) == 0 {
		return "flat"
	}
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = fmt.Sprintf("%s:%d", s.At, s.Percent)
	}
	return strings.Join(parts, ",")
}
