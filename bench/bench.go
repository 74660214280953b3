package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// Defaults of Config and DefaultConfig. The quota is 200 requests per 1 s
// window (a window standing in for a minute, so a run takes seconds): with
// calls taking 100-150 ms, about 25 calls in flight use it all, a fixed
// pool of 64 overruns it 2.5 times and a pool of 8 uses a third of it.
const (
	DefaultItems          = 3000
	DefaultRPM            = 200
	DefaultWindow         = time.Second
	DefaultLatency        = 100 * time.Millisecond
	DefaultJitter         = 50 * time.Millisecond
	DefaultRefusalLatency = 20 * time.Millisecond
	DefaultTimeout        = 10 * time.Second
	DefaultSampleEvery    = 100 * time.Millisecond
	DefaultItemSeed       = 1
)

// Config is one benchmark: the items, the simulator every strategy drains
// them against, and what is shared by all strategies. Zero fields take the
// defaults above; DefaultConfig also sets the simulator's.
type Config struct {
	// Items is how many reviews each strategy drains.
	Items int `json:"items"`
	// ItemSeed seeds the review generator (DistinctReviews).
	ItemSeed uint64 `json:"item_seed"`
	// Sim configures the simulator. A fresh one is started for each
	// strategy, so its Schedule counts from the start of each run.
	Sim geminisim.Config `json:"-"`
	// RefusalLatency is added to every 429 on its way to the client: the
	// network round trip a real refusal costs (see callCounter).
	RefusalLatency time.Duration `json:"refusal_latency_ns"`
	// Model is the Gemini model asked; "" means stages.DefaultModel.
	Model string `json:"model"`
	// Timeout bounds each request.
	Timeout time.Duration `json:"timeout_ns"`
	// SampleEvery is the concurrency sampling period.
	SampleEvery time.Duration `json:"sample_every_ns"`
	// MaxWall, if > 0, stops a strategy's run after that long: its status
	// is then "timeout" and the items not done count as lost. A client
	// that keeps knocking on a quota that counts refusals can keep it shut
	// for ever.
	MaxWall time.Duration `json:"max_wall_ns,omitempty"`
	// Dir holds the temporary databases; "" means os.TempDir().
	Dir string `json:"-"`
	// Log receives a line as each strategy starts and ends; nil discards.
	Log io.Writer `json:"-"`
}

// DefaultConfig is the benchmark of `sawtooth bench` for n items (0 means
// DefaultItems): DefaultRPM requests per DefaultWindow, no token quota,
// latency DefaultLatency plus up to DefaultJitter, no faults, and the quota
// halved for the middle third of an ideal run (HalfForAThird).
func DefaultConfig(n int) Config {
	if n <= 0 {
		n = DefaultItems
	}
	return Config{
		Items:    n,
		ItemSeed: DefaultItemSeed,
		Sim: geminisim.Config{
			RPM: DefaultRPM, Window: DefaultWindow,
			Schedule: HalfForAThird(n, DefaultRPM, DefaultWindow),
			Latency:  geminisim.Latency{Base: DefaultLatency, Jitter: DefaultJitter},
			Seed:     1,
		},
		RefusalLatency: DefaultRefusalLatency,
	}
}

func (c Config) withDefaults() Config {
	if c.Items <= 0 {
		c.Items = DefaultItems
	}
	if c.Model == "" {
		c.Model = stages.DefaultModel
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = DefaultSampleEvery
	}
	if c.Sim.APIKey == "" {
		c.Sim.APIKey = geminisim.DefaultAPIKey
	}
	if c.Sim.Window <= 0 {
		c.Sim.Window = geminisim.DefaultWindow
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Result is what one strategy did with the items. Counts of calls come
// from the simulator, counts of items from the database at the end.
type Result struct {
	Strategy string `json:"strategy"`
	// Status is the run's: complete, or stopped (a stage parked) with Message.
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// Wall is the run's wall time, from Runner.Run to its return.
	Wall time.Duration `json:"wall_ns"`
	// Lead is the time from Runner.Run to the first call reaching the
	// API (the runner starting, the first items sanitized); Tail from the
	// last answer to Run's return (the last items aggregated, the runner
	// stopping). Neither is the quota's or the controller's doing.
	Lead time.Duration `json:"lead_ns"`
	Tail time.Duration `json:"tail_ns"`
	// Items were ingested; ToClassify of them passed sanitize; Answered
	// of those got an answer from the API (a label, or a safety block).
	Items      int `json:"items"`
	ToClassify int `json:"to_classify"`
	Answered   int `json:"answered"`
	// Capacity is the requests the quota could admit over the run
	// (Capacity); Goodput is Answered/Capacity, at most about 1.
	Capacity float64 `json:"capacity"`
	Goodput  float64 `json:"goodput"`
	// Perfect is the time a perfect client needs for the same calls
	// against the same simulator (see Perfect); VsPerfect is Perfect over
	// Wall, at most about 1. Zero when not computed (RunMatrix does).
	Perfect   time.Duration `json:"perfect_ns,omitempty"`
	VsPerfect float64       `json:"vs_perfect,omitempty"`
	// Calls is every generateContent call the simulator received;
	// RateLimited the 429s among them (quota and bare capacity 429s);
	// Share429 their share of Calls; Overloaded the 503s of the
	// concurrency cap and of overload bursts.
	Calls       int64   `json:"calls"`
	RateLimited int64   `json:"rate_limited"`
	Share429    float64 `json:"share_429"`
	Overloaded  int64   `json:"overloaded,omitempty"`
	// CallsPerItem is Calls/ToClassify: 1 when nothing is paid twice or
	// refused.
	CallsPerItem float64 `json:"calls_per_item"`
	// ConcMean is the time-average of requests in flight between the
	// first call and the last answer; ConcP5 and ConcP95 the 5th and 95th
	// percentiles of the samples over that span; ConcMax the highest.
	ConcMean float64 `json:"conc_mean"`
	ConcP5   int     `json:"conc_p5"`
	ConcP95  int     `json:"conc_p95"`
	ConcMax  int     `json:"conc_max"`
	// LimitMin and LimitMax are the range of the limiter's limit (0
	// without a limiter).
	LimitMin int `json:"limit_min,omitempty"`
	LimitMax int `json:"limit_max,omitempty"`
	// Done items went through every stage; Dead were dead-lettered (empty
	// text, safety blocks: the same for every strategy, plus what a
	// strategy gave up, GaveUp); Lost did not get their answer because of
	// the strategy: still queued at the end, or given up.
	Done   int   `json:"done"`
	Dead   int   `json:"dead"`
	GaveUp int64 `json:"gave_up,omitempty"`
	Lost   int   `json:"lost"`
	// Series is the concurrency every SampleEvery.
	Series []Sample `json:"series,omitempty"`
	// Timeline is the simulator's per-second account (admitted calls,
	// 429s), seconds counted from its start, a few milliseconds before
	// the run's.
	Timeline []geminisim.Bucket `json:"timeline,omitempty"`

	// tokens are the input tokens of each item that reached the API, by
	// the simulator's item key, for Perfect.
	tokens map[string]int
}

// Sample is one point of a Result's series.
type Sample struct {
	// T is the time since the run started.
	T time.Duration `json:"t_ns"`
	// InFlight is requests in flight; Limit the limiter's limit (0 without one).
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit,omitempty"`
	// Done is the items past classify so far.
	Done int64 `json:"done"`
}

// stageDefs is the benchmark's pipeline definition.
var stageDefs = []store.StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}

// Run drains cfg.Items generated reviews once per strategy, in order, each
// through a fresh simulator and database, and returns one Result per
// strategy. It stops at the first error (a fatal one from a run, or ctx
// being canceled) and returns the results so far with it.
func Run(ctx context.Context, cfg Config, strategies []Strategy) ([]Result, error) {
	cfg = cfg.withDefaults()
	items := DistinctReviews(cfg.Items, cfg.ItemSeed)
	var out []Result
	for _, s := range strategies {
		fmt.Fprintf(cfg.Log, "bench: %-12s draining %d items...\n", s.Name, len(items))
		r, err := runOne(ctx, cfg, items, s)
		if err != nil {
			return out, fmt.Errorf("bench %s: %w", s.Name, err)
		}
		if r.Capacity > 0 {
			fmt.Fprintf(cfg.Log, "bench: %-12s %s in %s (first call after %s, last answer %s before the end), goodput %.1f%%, %d 429s\n", s.Name, r.Status,
				r.Wall.Round(100*time.Millisecond), r.Lead.Round(time.Millisecond), r.Tail.Round(time.Millisecond), 100*r.Goodput, r.RateLimited)
		} else {
			fmt.Fprintf(cfg.Log, "bench: %-12s %s in %s, %d 429s\n", s.Name, r.Status, r.Wall.Round(100*time.Millisecond), r.RateLimited)
		}
		out = append(out, r)
	}
	return out, nil
}

func runOne(ctx context.Context, cfg Config, items []pipeline.Record, s Strategy) (Result, error) {
	res := Result{Strategy: s.Name, Items: len(items)}
	dir, err := os.MkdirTemp(cfg.Dir, "sawtooth-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	db, err := openIngested(filepath.Join(dir, "bench.db"), items)
	if err != nil {
		return res, err
	}
	defer db.Close()

	sim := geminisim.New(cfg.Sim)
	simStart := time.Now()
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer sim.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConns, base.MaxIdleConnsPerHost = 1024, 512
	defer base.CloseIdleConnections()
	calls := &callCounter{base: base, refusal: cfg.RefusalLatency}
	cl, err := stages.NewClassify(ctx, stages.ClassifyConfig{
		APIKey: cfg.Sim.APIKey, BaseURL: url, Model: cfg.Model, Timeout: cfg.Timeout,
		HTTPClient: &http.Client{Transport: calls},
	})
	if err != nil {
		return res, err
	}
	classify := s.Classify(cl)

	var series []Sample
	r := &pipeline.Runner{
		Store: db,
		Stages: []pipeline.StageConfig{
			{Stage: &stages.Sanitize{}, MaxAttempts: 1},
			classify,
			{Stage: &stages.Aggregate{}, MaxAttempts: 1},
		},
		SampleEvery: cfg.SampleEvery,
		// A bench run is cut only by MaxWall or an interrupt: what is in
		// flight then is not waited for long.
		Grace: 500 * time.Millisecond,
		// OnTick runs on the runner's sampler goroutine, which Run waits for.
		OnTick: func(p pipeline.Progress) {
			c := p.Stages[1]
			series = append(series, Sample{T: p.Elapsed, InFlight: calls.load(), Limit: c.Limit, Done: c.Done + c.Dead})
		},
	}
	w, err := runTimed(ctx, cfg, r, &res)
	if err != nil {
		return res, err
	}
	res.Series = series
	res.fromSim(cfg, sim.Stats(), w.start.Sub(simStart), w.end.Sub(simStart))
	if err := res.fromStore(db, classify, w.sum); err != nil {
		return res, err
	}
	res.concurrency(calls, series, w.start, w.end)
	return res, nil
}

// openIngested opens a new bench database at path holding items.
func openIngested(path string, items []pipeline.Record) (*store.DB, error) {
	db, err := store.Open(path, store.Options{Stages: stageDefs})
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(items); i += 1000 {
		if _, err := db.Ingest(items[i:min(i+1000, len(items))]); err != nil {
			db.Close()
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	return db, nil
}

// timedRun is one bench run's summary and wall-clock bounds.
type timedRun struct {
	sum        pipeline.RunSummary
	start, end time.Time
}

// runTimed runs r within cfg.MaxWall, noting in res how it ended (a
// stop or the wall is a result, not an error) and its wall time.
func runTimed(ctx context.Context, cfg Config, r *pipeline.Runner, res *Result) (timedRun, error) {
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.MaxWall > 0 {
		runCtx, cancel = context.WithTimeout(ctx, cfg.MaxWall)
	}
	defer cancel()
	var w timedRun
	w.start = time.Now()
	sum, runErr := r.Run(runCtx)
	w.end, w.sum = time.Now(), sum
	timedOut := ctx.Err() == nil && runCtx.Err() != nil
	switch {
	case timedOut:
		res.Message = fmt.Sprintf("stopped after %s (MaxWall)", cfg.MaxWall)
	case runErr == nil:
	case ctx.Err() != nil:
		return w, ctx.Err()
	case errors.Is(runErr, pipeline.ErrStopped):
		res.Message = runErr.Error()
	default:
		return w, runErr
	}
	res.Status = sum.Status
	if timedOut {
		res.Status = "timeout"
	}
	res.Wall = w.end.Sub(w.start)
	return w, nil
}

// fromSim fills in what the simulator saw of a run from..to after its
// start: calls, refusals, items answered and the goodput.
func (res *Result) fromSim(cfg Config, st geminisim.Stats, from, to time.Duration) {
	res.Timeline = st.Timeline
	res.Calls = st.Calls
	res.RateLimited = st.Outcomes[geminisim.OutcomeRateLimited] + st.Outcomes[geminisim.OutcomeCapacity]
	res.Overloaded = st.Outcomes[geminisim.OutcomeOverloaded] + st.Outcomes[geminisim.OutcomeOverloadBurst]
	res.tokens = make(map[string]int, len(st.Items))
	for key, it := range st.Items {
		if it.BilledTokens > 0 {
			res.Answered++
		}
		res.tokens[key] = int(it.PromptTokens)
	}
	res.Capacity = Capacity(cfg.Sim, from, to)
	if res.Capacity > 0 {
		res.Goodput = float64(res.Answered) / res.Capacity
	}
	if res.Calls > 0 {
		res.Share429 = float64(res.RateLimited) / float64(res.Calls)
	}
}

// fromStore fills in where the run left the items, and the classify
// stage's limits.
func (res *Result) fromStore(db *store.DB, classify pipeline.StageConfig, sum pipeline.RunSummary) error {
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	res.Done = counts.Done
	for _, sc := range counts.Stages {
		res.Dead += sc.Dead
	}
	res.ToClassify = res.Items - counts.Stages[0].Dead - counts.Stages[0].Queued
	if res.ToClassify > 0 {
		res.CallsPerItem = float64(res.Calls) / float64(res.ToClassify)
	}
	if g, ok := classify.Stage.(interface{ GaveUp() int64 }); ok {
		res.GaveUp = g.GaveUp()
	}
	res.Lost = res.Items - res.Done - res.Dead + int(res.GaveUp)
	if cs := sum.Stages["classify"]; cs != nil {
		res.LimitMin, res.LimitMax = cs.LimitMin, cs.LimitMax
	}
	return nil
}

// concurrency fills in the calls in flight between the first request
// and the last answer of a run from start to end, and the lead and tail
// outside them.
func (res *Result) concurrency(calls *callCounter, series []Sample, start, end time.Time) {
	mean, _ := calls.mean()
	res.ConcMean = mean
	calls.mu.Lock()
	from, to := calls.first.Sub(start), calls.last.Sub(start)
	calls.mu.Unlock()
	res.Lead, res.Tail = from, end.Sub(start)-to
	var busy []int
	for _, p := range series {
		if p.T >= from && p.T <= to {
			busy = append(busy, p.InFlight)
		}
	}
	if len(busy) > 0 {
		slices.Sort(busy)
		res.ConcP5 = busy[len(busy)*5/100]
		res.ConcP95 = busy[min(len(busy)-1, len(busy)*95/100)]
		res.ConcMax = busy[len(busy)-1]
	}
}
