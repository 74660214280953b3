package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// Shape is one quota shape of the matrix: a simulator configuration whose
// windows are scaled down (1-4 s standing for a minute) so that a run
// takes seconds.
type Shape struct {
	// Name is the short name used on the command line and in tables.
	Name string `json:"name"`
	// Description says in one line what the shape is.
	Description string `json:"description"`
	// Items is how many reviews each strategy drains on this shape.
	Items int `json:"items"`
	// Sim is the simulator. A TPM of tpmShare > 0 is filled in by
	// RunMatrix from the items' mean prompt tokens.
	Sim geminisim.Config `json:"-"`
	// tpmRequests, if > 0, sets Sim.TPM to that many mean-sized requests'
	// tokens per window.
	tpmRequests float64
	// halfForAThird sets Sim.Schedule to HalfForAThird of the shape's
	// items, whatever their number.
	halfForAThird bool
}

// Default shape parameters: 200 requests per second of quota, calls of
// 100-150 ms, about 30 s of work for a perfect client. A run must span
// many windows: the perfect client takes a whole window's quota at once
// at the start, a head start a client that paces a rate never makes up,
// and a controller's first round trips (slow start, the first 429) are a
// fixed cost. Over 3 s (600 items) those two alone held a client that
// paces the quota exactly to about 0.75 of the perfect one in virtual
// time; over 30 s they cost a few percent, as in the limiter's own
// virtual-time simulation. --items shortens the matrix for a quick look.
const (
	matrixItems   = 6000
	matrixPerSec  = 200
	matrixLatency = 100 * time.Millisecond
	matrixJitter  = 50 * time.Millisecond
)

// Shapes returns the matrix's shapes; long adds two whose calls take
// seconds: a thinking model on a quota that needs hundreds of calls in
// flight, and a real per-minute window (a minute or more per strategy,
// about 8 for fixed-8).
//
// It is one table, kept whole past the usual length: each shape reads as
// one literal beside its description, and the shapes are compared side
// by side.
func Shapes(long bool) []Shape {
	lat := geminisim.Latency{Base: matrixLatency, Jitter: matrixJitter}
	perWindow := func(w time.Duration) int { return int(matrixPerSec * w.Seconds()) }
	shapes := []Shape{
		{
			Name:        "sliding-drift",
			Description: "sliding log, 200/1s, quota at 50% for the middle third; 250-350 ms calls (~3 round trips per window); exact retryDelay",
			Sim: geminisim.Config{RPM: perWindow(time.Second), Window: time.Second,
				Latency: geminisim.Latency{Base: 250 * time.Millisecond, Jitter: 100 * time.Millisecond}},
			halfForAThird: true,
		},
		{
			Name:        "sliding-coarse",
			Description: "sliding log, 400/2s, 80-120 ms calls (~20 round trips per window); coarse retryDelay (whole seconds: 1 or 2 s, up to a window late)",
			Sim: geminisim.Config{RPM: perWindow(2 * time.Second), Window: 2 * time.Second, RetryInfo: geminisim.RetryCoarse,
				Latency: geminisim.Latency{Base: 80 * time.Millisecond, Jitter: 40 * time.Millisecond}},
		},
		{
			Name:        "fixed-exact",
			Description: "fixed window reset every 1 s, 200 per window; retryDelay = time to the boundary",
			Sim:         geminisim.Config{RPM: perWindow(time.Second), Window: time.Second, QuotaModel: geminisim.FixedWindow, Latency: lat},
		},
		{
			Name:        "fixed-noretry",
			Description: "fixed window reset every 1 s, 200 per window; no RetryInfo",
			Sim: geminisim.Config{RPM: perWindow(time.Second), Window: time.Second, QuotaModel: geminisim.FixedWindow,
				RetryInfo: geminisim.RetryAbsent, Latency: lat},
		},
		{
			Name:        "bucket-burst",
			Description: "token bucket, 200/s, burst 10; exact retryDelay",
			Sim: geminisim.Config{RPM: perWindow(time.Second), Window: time.Second, QuotaModel: geminisim.TokenBucket,
				BurstRequests: 10, Latency: lat},
		},
		{
			Name:        "bucket-drift-noretry",
			Description: "token bucket, 200/s, burst 20, quota at 50% for the middle third; no RetryInfo, no quotaValue",
			Sim: geminisim.Config{RPM: perWindow(time.Second), Window: time.Second, QuotaModel: geminisim.TokenBucket,
				BurstRequests: 20, RetryInfo: geminisim.RetryAbsent,
				QuotaFailure: geminisim.QuotaFailureNoValue, Latency: lat},
			halfForAThird: true,
		},
		{
			Name:        "cap-bare429",
			Description: "no quota; a server-side cap of 24 calls in flight answered with bare 429s (no details)",
			Sim: geminisim.Config{MaxConcurrent: 24, ConcurrencyRefusal: geminisim.RefuseBare429,
				Latency: lat},
		},
		{
			Name:        "tpm-counted",
			Description: "sliding log, TPM binding at ~170 requests' tokens per 1 s (RPM 300 also listed when hit); refused calls count against the quota",
			Sim:         geminisim.Config{RPM: 300, Window: time.Second, CountRefused: true, Latency: lat},
			tpmRequests: 170,
		},
		{
			Name:        "tail-load-503",
			Description: "sliding log, 200/1s; heavy-tailed latency (50 ms x Pareto 1.3, max 4 s) growing 2 ms per call in flight; 503 bursts of 200 ms every 1.5 s",
			Sim: geminisim.Config{RPM: perWindow(time.Second), Window: time.Second,
				Latency:  geminisim.Latency{Base: 50 * time.Millisecond, Tail: 1.3, Max: 4 * time.Second, PerInFlight: 2 * time.Millisecond},
				Overload: geminisim.Overload{Every: 1500 * time.Millisecond, For: 200 * time.Millisecond}},
		},
	}
	if long {
		shapes = append(shapes, Shape{
			Name:        "thinking-named",
			Description: "sliding log, 100/1s, named in every 429; 1-3 s calls (a thinking model on a paid tier): the quota needs ~200 calls in flight, 3x slow start's brake; exact retryDelay",
			Items:       4000,
			Sim: geminisim.Config{RPM: 100, Window: time.Second,
				Latency: geminisim.Latency{Base: time.Second, Jitter: 2 * time.Second}},
		}, Shape{
			Name:        "minute-ample",
			Description: "real per-minute sliding window, 1800 per minute: 60 calls of 1-3 s in flight use it; 1850 items, so a perfect client needs one window and a bit; exact retryDelay",
			Items:       1850,
			Sim: geminisim.Config{RPM: 1800, Window: time.Minute,
				Latency: geminisim.Latency{Base: time.Second, Jitter: 2 * time.Second}},
		})
	}
	for i := range shapes {
		if shapes[i].Items == 0 {
			shapes[i].Items = matrixItems
		}
		shapes[i].Sim.Seed = 1
		shapes[i] = shapes[i].withItems(shapes[i].Items)
	}
	return shapes
}

// withItems returns the shape draining n items, its live schedule (if it
// has one) fitted to them.
func (sh Shape) withItems(n int) Shape {
	sh.Items = n
	if sh.halfForAThird {
		sh.Sim.Schedule = HalfForAThird(n, sh.Sim.RPM, sh.Sim.Window)
	}
	return sh
}

// unnamed returns the shape with its 429s naming no budget: a
// QuotaFailure without quotaValue (see MatrixOptions.Unnamed).
func (sh Shape) unnamed() Shape {
	if sh.Sim.RPM == 0 && sh.Sim.TPM == 0 {
		return sh // no quota: its 429s are a cap's, bare
	}
	if sh.Sim.QuotaFailure == "" || sh.Sim.QuotaFailure == geminisim.QuotaFailureFull {
		sh.Sim.QuotaFailure = geminisim.QuotaFailureNoValue
		sh.Description += "; 429s name no budget"
	}
	return sh
}

// MatrixOptions configure RunMatrix. Zero fields take defaults.
type MatrixOptions struct {
	// Shapes names the shapes to run, in order; empty means all of
	// Shapes(Long).
	Shapes []string
	// Long adds the shapes whose calls take seconds (see Shapes).
	Long bool
	// Unnamed strips the budget from every shape's 429s: QuotaFailure
	// without quotaValue, as proxies and some servers send it, so the
	// controller must find each quota by its refusals alone. Shapes
	// whose 429s carry no QuotaFailure (Vertex's, a cap's bare ones)
	// keep theirs.
	Unnamed bool
	// Strategies are run on every shape; empty means Strategies().
	Strategies []Strategy
	// Items overrides every shape's item count when > 0.
	Items int
	// Runs is how many times each cell is run; the table shows medians.
	// Default 1.
	Runs int
	// RefusalLatency is added to every 429 (see Config.RefusalLatency);
	// default DefaultRefusalLatency.
	RefusalLatency time.Duration
	// JSON prints a MatrixReport as JSON instead of the table.
	JSON bool
	// PlotDir, if set, receives one SVG per shape (matrix-<shape>.svg) of
	// the first run.
	PlotDir string
	// Dir holds the temporary databases; "" means os.TempDir().
	Dir string
	// Log receives a line per run; nil discards.
	Log io.Writer
	// MaxWall stops a run after that many times the shape's perfect time
	// (estimated from the items' mean tokens), at least a minute; its
	// status is then "timeout". Default 20.
	MaxWall float64
}

// MatrixReport is what RunMatrix measured.
type MatrixReport struct {
	Runs int `json:"runs"`
	// Unnamed: the 429s named no budget (see MatrixOptions.Unnamed).
	Unnamed bool          `json:"unnamed,omitempty"`
	Shapes  []ShapeReport `json:"shapes"`
}

// ShapeReport is one shape's row group.
type ShapeReport struct {
	Shape
	// Perfect is the perfect client's time for the shape's items (see
	// Perfect), from the tokens the simulator saw.
	Perfect time.Duration `json:"perfect_ns"`
	Cells   []Cell        `json:"cells"`
}

// Cell is one shape × strategy: the median of each figure over the runs,
// and every run's summary.
type Cell struct {
	Strategy     string        `json:"strategy"`
	VsPerfect    float64       `json:"vs_perfect"`
	Share429     float64       `json:"share_429"`
	CallsPerItem float64       `json:"calls_per_item"`
	ConcMean     float64       `json:"conc_mean"`
	ConcP95      float64       `json:"conc_p95"`
	Lost         float64       `json:"lost"`
	Wall         time.Duration `json:"wall_ns"`
	// Incomplete counts the runs that did not complete: stopped by the
	// engine (a per-day quota, too many refusals in a row) or by MaxWall.
	Incomplete int      `json:"incomplete,omitempty"`
	Results    []Result `json:"results"`
}

// RunMatrix runs every strategy on every shape opts.Runs times, each run
// through a fresh simulator and database as Run does, and writes the
// median table (or JSON) to w, and the plots to opts.PlotDir. It returns
// what it measured even when ctx is canceled midway (with ctx's error).
func RunMatrix(ctx context.Context, opts MatrixOptions, w io.Writer) (MatrixReport, error) {
	opts.setDefaults()
	shapes, err := LookupShapes(opts.Shapes, opts.Long)
	if err != nil {
		return MatrixReport{}, err
	}
	rep := MatrixReport{Runs: opts.Runs, Unnamed: opts.Unnamed}
	var runErr error
	for _, sh := range shapes {
		if opts.Items > 0 {
			sh = sh.withItems(opts.Items)
		}
		if opts.Unnamed {
			sh = sh.unnamed()
		}
		cfg := shapeConfig(sh, opts)
		var byStrategy [][]Result
		byStrategy, runErr = runShape(ctx, opts, sh, cfg)
		sr := scoreShape(sh, cfg, opts.Strategies, byStrategy)
		if opts.PlotDir != "" && len(byStrategy) > 0 && len(byStrategy[0]) > 0 {
			var first []Result
			for _, rs := range byStrategy {
				if len(rs) > 0 {
					first = append(first, rs[0])
				}
			}
			if err := writeShapePlot(opts.PlotDir, sh, cfg, first); err != nil {
				return rep, err
			}
		}
		rep.Shapes = append(rep.Shapes, sr)
		// The log gets each shape's rows as soon as they are known, so a
		// long matrix cut short still leaves its figures.
		WriteMatrixTable(opts.Log, MatrixReport{Runs: opts.Runs, Shapes: []ShapeReport{sr}})
		if runErr != nil {
			break
		}
	}
	if err := writeMatrix(w, rep, opts.JSON); err != nil {
		return rep, err
	}
	return rep, runErr
}

func (opts *MatrixOptions) setDefaults() {
	if opts.Runs <= 0 {
		opts.Runs = 1
	}
	if opts.RefusalLatency <= 0 {
		opts.RefusalLatency = DefaultRefusalLatency
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.MaxWall <= 0 {
		opts.MaxWall = 20
	}
	if len(opts.Strategies) == 0 {
		opts.Strategies = Strategies()
	}
}

// runShape runs every strategy on shape sh opts.Runs times, stopping at
// the first run that fails; the results are by strategy, then run.
func runShape(ctx context.Context, opts MatrixOptions, sh Shape, cfg Config) ([][]Result, error) {
	byStrategy := make([][]Result, len(opts.Strategies))
	var runErr error
	for run := 0; run < opts.Runs && runErr == nil; run++ {
		fmt.Fprintf(opts.Log, "matrix: %s, run %d of %d\n", sh.Name, run+1, opts.Runs)
		results, err := Run(ctx, cfg, opts.Strategies)
		for i, r := range results {
			byStrategy[i] = append(byStrategy[i], r)
		}
		runErr = err
	}
	return byStrategy, runErr
}

// scoreShape scores each run against the perfect client's time and
// keeps each strategy's median.
func scoreShape(sh Shape, cfg Config, strategies []Strategy, byStrategy [][]Result) ShapeReport {
	sr := ShapeReport{Shape: sh}
	perfect := perfectFor(cfg.Sim, byStrategy)
	sr.Perfect = perfect(perfectWorkers)
	for i, rs := range byStrategy {
		if len(rs) == 0 {
			continue
		}
		for j := range rs {
			rs[j].Perfect = perfect(max(perfectWorkers, rs[j].ConcP95))
			// A run that stopped early did not do the work: it scores 0.
			if rs[j].Status == "complete" && rs[j].Wall > 0 {
				rs[j].VsPerfect = rs[j].Perfect.Seconds() / rs[j].Wall.Seconds()
			}
		}
		sr.Cells = append(sr.Cells, median(strategies[i].Name, rs))
	}
	return sr
}

// writeMatrix writes rep to w as the median table, or as JSON without
// the runs' series and timelines.
func writeMatrix(w io.Writer, rep MatrixReport, asJSON bool) error {
	if !asJSON {
		WriteMatrixTable(w, rep)
		return nil
	}
	for i := range rep.Shapes {
		for j := range rep.Shapes[i].Cells {
			for k := range rep.Shapes[i].Cells[j].Results {
				r := &rep.Shapes[i].Cells[j].Results[k]
				r.Series, r.Timeline = nil, nil
			}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// LookupShapes returns the named shapes of Shapes(long) in the order
// given; none means all.
func LookupShapes(names []string, long bool) ([]Shape, error) {
	all := Shapes(long)
	if len(names) == 0 {
		return all, nil
	}
	var out []Shape
	for _, n := range names {
		i := slices.IndexFunc(all, func(s Shape) bool { return s.Name == n })
		if i < 0 {
			known := make([]string, len(all))
			for j, s := range all {
				known[j] = s.Name
			}
			return nil, fmt.Errorf("unknown shape %q (known: %s; minute-ample and thinking-named need --long)", n, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// shapeConfig is the benchmark configuration of one shape.
func shapeConfig(sh Shape, opts MatrixOptions) Config {
	cfg := Config{
		Items: sh.Items, ItemSeed: DefaultItemSeed, Sim: sh.Sim,
		RefusalLatency: opts.RefusalLatency, Dir: opts.Dir, Log: opts.Log,
	}
	if sh.tpmRequests > 0 {
		cfg.Sim.TPM = int(sh.tpmRequests * meanPromptTokens(DistinctReviews(sh.Items, DefaultItemSeed)))
	}
	// A long window needs a long enough timeout for its slowest calls.
	cfg.Timeout = max(DefaultTimeout, 4*sh.Sim.Latency.Mean(0, 0))
	mean := meanPromptTokens(DistinctReviews(sh.Items, DefaultItemSeed))
	reqs := make([]Request, sh.Items)
	for i := range reqs {
		reqs[i] = Request{Tokens: int(math.Ceil(mean))}
	}
	if d, ok := Perfect(cfg.Sim, reqs, perfectWorkers); ok && opts.MaxWall > 0 {
		cfg.MaxWall = max(time.Minute, time.Duration(opts.MaxWall*float64(d)))
	}
	return cfg
}

// meanPromptTokens is the simulator's mean input tokens per classify
// request for items: the default system instruction plus the cleaned text.
func meanPromptTokens(items []pipeline.Record) float64 {
	sys := stages.DefaultSystemInstruction(stages.DefaultLabels)
	total, n := 0, 0
	for _, it := range items {
		c, err := stages.Clean(it.Text, stages.SanitizeOptions{})
		if err != nil {
			continue
		}
		total += geminisim.EstimateTokens(sys + c.Text)
		n++
	}
	if n == 0 {
		return 1
	}
	return float64(total) / float64(n)
}

// perfectWorkers is the fewest requests in flight the perfect client is
// held to: a run is measured against a perfect client with as many
// workers as the run kept in flight at its 95th percentile, or this many
// when fewer (see Perfect). 64 is the pool most clients give a quota
// like the matrix's; a client that keeps fewer in flight is not charged
// for the whole window a perfect client with hundreds of workers sends
// at the start, and one that keeps more (thinking models, ample quotas;
// limiter.DefaultCeiling is 512) is measured against a client allowed as
// many.
const perfectWorkers = 64

// perfectFor returns the perfect client's time, with at most a given
// number of requests in flight, for the items the simulator saw in any
// run, in the order they were ingested (item ids sort in that order),
// with the tokens it charged them. Each worker count is computed once.
func perfectFor(sim geminisim.Config, runs [][]Result) func(workers int) time.Duration {
	tokens := map[string]int{}
	for _, rs := range runs {
		for _, r := range rs {
			for k, v := range r.tokens {
				tokens[k] = v
			}
		}
	}
	keys := make([]string, 0, len(tokens))
	for k := range tokens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seq := make([]Request, len(keys))
	for i, k := range keys {
		seq[i] = Request{Key: k, Tokens: tokens[k]}
	}
	known := map[int]time.Duration{}
	return func(workers int) time.Duration {
		if d, ok := known[workers]; ok {
			return d
		}
		d, ok := Perfect(sim, seq, workers)
		if !ok {
			d = 0
		}
		known[workers] = d
		return d
	}
}

// median summarizes one cell's runs.
func median(strategy string, rs []Result) Cell {
	c := Cell{Strategy: strategy, Results: rs}
	pick := func(f func(Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	c.VsPerfect = pick(func(r Result) float64 { return r.VsPerfect })
	c.Share429 = pick(func(r Result) float64 { return r.Share429 })
	c.CallsPerItem = pick(func(r Result) float64 { return r.CallsPerItem })
	c.ConcMean = pick(func(r Result) float64 { return r.ConcMean })
	c.ConcP95 = pick(func(r Result) float64 { return float64(r.ConcP95) })
	c.Lost = pick(func(r Result) float64 { return float64(r.Lost) })
	c.Wall = time.Duration(pick(func(r Result) float64 { return float64(r.Wall) }))
	for _, r := range rs {
		if r.Status != "complete" {
			c.Incomplete++
		}
	}
	return c
}

// WriteMatrixTable writes rep as one aligned table, a group of rows per
// shape, then the shapes' descriptions.
func WriteMatrixTable(w io.Writer, rep MatrixReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tperfect\tstrategy\tvs perfect\t429 share\tcalls/item\tconc mean\tconc p95\tlost\twall\t")
	for _, sr := range rep.Shapes {
		for i, c := range sr.Cells {
			shape, perfect := "", ""
			if i == 0 {
				shape, perfect = sr.Name, fmt.Sprintf("%.1fs", sr.Perfect.Seconds())
			}
			name := c.Strategy
			if c.Incomplete > 0 {
				name += fmt.Sprintf(" (%d incomplete)", c.Incomplete)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f%%\t%.3f\t%.1f\t%s\t%s\t%.1fs\t\n",
				shape, perfect, name, c.VsPerfect, 100*c.Share429, c.CallsPerItem, c.ConcMean,
				trimFloat(c.ConcP95), trimFloat(c.Lost), c.Wall.Seconds())
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nmedians of %d run(s) per cell; vs perfect = perfect client's time / wall time, the perfect client holding at most as many in flight as the run's conc p95, or %d when fewer (the perfect column is for %d)\n", rep.Runs, perfectWorkers, perfectWorkers)
	for _, sr := range rep.Shapes {
		fmt.Fprintf(w, "  %-21s %d items: %s\n", sr.Name, sr.Items, sr.Description)
	}
}

// trimFloat prints a median that is usually whole without decimals.
func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

func writeShapePlot(dir string, sh Shape, cfg Config, results []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plot directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, "matrix-"+sh.Name+".svg")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := WriteSVG(f, cfg, results); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}
