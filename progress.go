package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// obsOptions say how a run reports on itself while it runs: log records
// on stderr and, optionally, Prometheus metrics. The run summary on stdout
// does not depend on them.
type obsOptions struct {
	LogFormat   string
	LogLevel    string
	MetricsAddr string
}

func obsFlags(o *obsOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log records on stderr as text|json (the periodic progress records too, when stderr is not a terminal or with --no-progress)", EnvVars: []string{"SAWTOOTH_LOG_FORMAT"}, Destination: &o.LogFormat},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "least severe log records shown: debug|info|warn|error (warn hides the periodic progress records)", EnvVars: []string{"SAWTOOTH_LOG_LEVEL"}, Destination: &o.LogLevel},
		&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics at http://`ADDR`/metrics while the run lasts, e.g. 127.0.0.1:9090", EnvVars: []string{"SAWTOOTH_METRICS_ADDR"}, Destination: &o.MetricsAddr},
	}
}

// newLogger returns the logger of one command: text or JSON records on w
// at level and above.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level // zero: info
	if err := lv.UnmarshalText([]byte(level)); level != "" && err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usagef("--log-format %q: want text or json", format)
	}
}

// isTerminal says whether w is a terminal that can redraw live bars.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// liveStatus is what a running process publishes beside its DB every
// second, so that `status` can answer while bbolt's lock keeps other
// processes out, and what the bars, the progress records and the metrics
// show. A value is never modified once published.
type liveStatus struct {
	PID        int         `json:"pid"`
	RunID      string      `json:"run_id"`
	Started    time.Time   `json:"started"`
	Updated    time.Time   `json:"updated"`
	Elapsed    float64     `json:"elapsed_seconds"`
	MetricsURL string      `json:"metrics_url,omitempty"`
	Stages     []liveStage `json:"stages"`
}

// liveStage is one stage's figures for the run so far.
type liveStage struct {
	Name string `json:"name"`
	// Total is how many items this run expects the stage to finish: those
	// queued at it or at an earlier stage when the run started, less the
	// dead letters of earlier stages since.
	Total int64 `json:"total"`
	Done  int64 `json:"done"`
	Dead  int64 `json:"dead"`
	// Queued is the items waiting at the stage or being processed there.
	Queued int64 `json:"queued"`
	// Rate is items finished (done or dead) per second over the last
	// rateSpan; ETASeconds the time left at that rate, -1 when unknown.
	Rate       float64 `json:"rate_per_second"`
	ETASeconds float64 `json:"eta_seconds"`
	// FinishedAt is the second of the run at which the stage finished its
	// Total (then Rate is its average rate until then); 0 while it has not.
	FinishedAt float64 `json:"finished_at_seconds,omitempty"`
	// Calls by outcome; Calls counts every call, 429s included. Outcomes
	// has every class (pipeline.Classes), "ok" for successes.
	Outcomes    map[pipeline.Class]int64 `json:"outcomes"`
	Calls       int64                    `json:"calls"`
	OK          int64                    `json:"ok"`
	RateLimited int64                    `json:"rate_limited"`
	Transient   int64                    `json:"transient"`
	Permanent   int64                    `json:"permanent"`
	Limit       int                      `json:"limit,omitempty"`
	InFlight    int                      `json:"in_flight"`
	TokensIn    int64                    `json:"tokens_in"`
	TokensOut   int64                    `json:"tokens_out"`
	Tokens      int64                    `json:"tokens"`
	CostUSD     float64                  `json:"cost_usd"`
}

// Finished is how many items left the stage (done or dead letter).
func (s liveStage) Finished() int64 { return s.Done + s.Dead }

// Share429 is the share of calls refused with 429, in percent.
func (s liveStage) Share429() float64 {
	if s.Calls == 0 {
		return 0
	}
	return 100 * float64(s.RateLimited) / float64(s.Calls)
}

// api is the stage with a concurrency limit, or nil.
func (v *liveStatus) api() *liveStage {
	for i := range v.Stages {
		if v.Stages[i].Limit > 0 {
			return &v.Stages[i]
		}
	}
	return nil
}

func liveStatusPath(db string) string { return db + ".status.json" }

// progressConfig configures a progressPrinter.
type progressConfig struct {
	DBPath string
	RunID  string
	// Stages are the stage names in pipeline order; Queued how many items
	// were queued at each when the run started.
	Stages []string
	Queued []int64
	// Limiters are the stages' limiters by index (nil: none), read for
	// the limit before the runner's first tick and by the metrics live.
	Limiters []pipeline.Limiter
	// Cost estimates the USD cost of a usage; nil means free.
	Cost func(pipeline.Usage) float64
	// Live draws bars (for a terminal); otherwise the progress is logged
	// as an Info record every Every (default 5s).
	Live  bool
	Every time.Duration
	// Width is the bars' width; 0 means the terminal's.
	Width int
	// Refresh, if set, redraws the bars on each receive instead of on a
	// timer, and forces terminal output to a non-terminal writer (tests).
	Refresh <-chan any
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// rateSpan is the window over which throughput (and so ETA) is measured.
const rateSpan = 10 * time.Second

// progressPrinter shows a run's live figures: bars on a terminal, or
// periodic log records elsewhere. It also publishes them in the live
// status file beside the DB and backs the metrics. tick is called by the runner about once a second;
// close once after the run. Safe for concurrent use.
type progressPrinter struct {
	cfg   progressConfig
	log   *slog.Logger
	out   *switchWriter
	start time.Time
	view  atomic.Pointer[liveStatus]

	mu         sync.Mutex // guards what follows
	rates      []rateWindow
	finishedAt []float64
	lastLog    time.Time
	metricsURL string
	closed     bool

	bars      *mpb.Progress
	stageBars []*mpb.Bar
	statusBar *mpb.Bar
	metrics   *metricsServer
}

// newProgressPrinter starts showing a run's progress on out. Log records
// should be written through out too (log is usually built on it): while
// the bars are live they are printed above them.
func newProgressPrinter(out *switchWriter, log *slog.Logger, cfg progressConfig) *progressPrinter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &progressPrinter{cfg: cfg, log: log, out: out, start: cfg.Now()}
	p.lastLog = p.start
	p.rates = make([]rateWindow, len(cfg.Stages))
	p.finishedAt = make([]float64, len(cfg.Stages))
	var zero pipeline.Progress
	for _, name := range cfg.Stages {
		zero.Stages = append(zero.Stages, pipeline.StageProgress{Name: name})
	}
	p.view.Store(p.buildView(zero, p.start))
	if cfg.Live {
		p.startBars(out.w)
	}
	return p
}

// Writer is where other output meant for stderr goes while the run lasts:
// above the bars when they are live.
func (p *progressPrinter) Writer() io.Writer { return p.out }

// Status is the latest published figures.
func (p *progressPrinter) Status() *liveStatus { return p.view.Load() }

func (p *progressPrinter) setMetricsURL(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metricsURL = u
	v := *p.view.Load()
	v.MetricsURL = u
	p.view.Store(&v)
}

// tick takes the runner's figures: it updates the view, the bars, the
// status file and, every cfg.Every, logs a progress record.
func (p *progressPrinter) tick(pr pipeline.Progress) {
	// Held throughout, so that close never races a tick: once closed,
	// no tick rewrites the status file. Nothing called here takes p.mu
	// (the bars' decorators read p.view).
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	now := p.cfg.Now()
	v := p.buildView(pr, now)
	p.view.Store(v)
	p.publish(v)
	if p.bars != nil {
		p.updateBars(v)
	}
	if !p.cfg.Live && now.Sub(p.lastLog) >= p.cfg.Every {
		p.lastLog = now
		p.logProgress(v)
	}
}

// buildView derives the published figures from the runner's. Callers
// hold p.mu (or own p exclusively).
func (p *progressPrinter) buildView(pr pipeline.Progress, now time.Time) *liveStatus {
	v := &liveStatus{PID: os.Getpid(), RunID: p.cfg.RunID, Started: p.start, Updated: now,
		Elapsed: now.Sub(p.start).Seconds(), MetricsURL: p.metricsURL}
	var queuedBefore, deadBefore, doneBefore int64
	for i, name := range p.cfg.Stages {
		var sp pipeline.StageProgress
		for _, s := range pr.Stages {
			if s.Name == name {
				sp = s
			}
		}
		var queued int64
		if i < len(p.cfg.Queued) {
			queued = p.cfg.Queued[i]
		}
		queuedBefore += queued
		s := liveStage{
			Name: name, Total: max(queuedBefore-deadBefore, 0), Done: sp.Done, Dead: sp.Dead,
			Queued: max(queued+doneBefore-sp.Done-sp.Dead, 0),
			Calls:  sp.Calls, RateLimited: sp.RateLimited, Transient: sp.Transient,
			Limit: sp.Limit, InFlight: sp.InFlight,
			TokensIn: sp.Usage.PromptTokens, TokensOut: sp.Usage.CandidateTokens, Tokens: sp.Usage.TotalTokens,
			ETASeconds: -1,
		}
		s.Outcomes = sp.Outcomes
		s.OK, s.Permanent = sp.Outcomes[pipeline.ClassOK], sp.Outcomes[pipeline.ClassPermanent]
		if lim := p.limiter(i); lim != nil && s.Limit == 0 {
			s.Limit = lim.Limit()
		}
		if p.cfg.Cost != nil {
			s.CostUSD = p.cfg.Cost(sp.Usage)
		}
		s.Rate = p.rates[i].add(now, s.Finished())
		switch left := s.Total - s.Finished(); {
		case left <= 0:
			s.ETASeconds = 0
			if p.finishedAt[i] == 0 {
				p.finishedAt[i] = max(v.Elapsed, 0.001)
			}
			s.FinishedAt = p.finishedAt[i]
			s.Rate = float64(s.Finished()) / s.FinishedAt
		case s.Rate > 0:
			s.ETASeconds = float64(left) / s.Rate
		}
		v.Stages = append(v.Stages, s)
		deadBefore += sp.Dead
		doneBefore = sp.Done
	}
	return v
}

// limiter is stage i's limiter, or nil.
func (p *progressPrinter) limiter(i int) pipeline.Limiter {
	if i < len(p.cfg.Limiters) {
		return p.cfg.Limiters[i]
	}
	return nil
}

// logProgress writes one progress record: per stage finished/total, rate
// and ETA, and the API stage's limit, in-flight calls, 429 share, tokens
// and cost.
func (p *progressPrinter) logProgress(v *liveStatus) {
	attrs := []any{slog.String("elapsed", secs(v.Elapsed).String())}
	for _, s := range v.Stages {
		g := []any{"done", s.Done, "dead", s.Dead, "total", s.Total, "rate", round1(s.Rate), "eta", etaString(s.ETASeconds)}
		if s.Limit > 0 {
			g = append(g, "limit", s.Limit, "in_flight", s.InFlight, "calls", s.Calls, "r429_pct", round1(s.Share429()),
				"transient", s.Transient, "tokens_in", s.TokensIn, "tokens_out", s.TokensOut, "cost_usd", round4(s.CostUSD))
		}
		attrs = append(attrs, slog.Group(s.Name, g...))
	}
	p.log.Info("progress", attrs...)
}

// startBars draws one bar per stage (finished/total, rate, ETA) and a line
// with the API stage's limit, in-flight calls, 429 share, tokens and cost.
func (p *progressPrinter) startBars(w io.Writer) {
	opts := []mpb.ContainerOption{mpb.WithOutput(w), mpb.WithWidth(p.cfg.Width)}
	if p.cfg.Refresh != nil {
		opts = append(opts, mpb.WithManualRefresh(p.cfg.Refresh), mpb.ForceTTY())
	} else {
		opts = append(opts, mpb.WithRefreshRate(250*time.Millisecond))
	}
	p.bars = mpb.New(opts...)
	p.out.set(p.bars)
	nameW := len("elapsed")
	for _, n := range p.cfg.Stages {
		nameW = max(nameW, len(n))
	}
	v := p.view.Load()
	countW := 0
	for _, s := range v.Stages {
		countW = max(countW, 2*len(fmtCount(s.Total))+1)
	}
	for i, name := range p.cfg.Stages {
		bar := p.bars.New(v.Stages[i].Total,
			mpb.BarStyle().Lbound("│").Filler("█").Tip("█").Padding("░").Rbound("│"),
			mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return fmt.Sprintf("%-*s", nameW, name) })),
			mpb.AppendDecorators(decor.Any(func(st decor.Statistics) string {
				return p.stageText(i, countW)
			})),
			mpb.BarNoPop(),
		)
		p.stageBars = append(p.stageBars, bar)
	}
	p.statusBar = p.bars.New(1, mpb.NopStyle(),
		mpb.PrependDecorators(decor.Any(func(st decor.Statistics) string { return p.statusText(nameW, st.AvailableWidth) })),
	)
}

// stageText is what follows stage i's bar.
func (p *progressPrinter) stageText(i, countW int) string {
	v := p.view.Load()
	if i >= len(v.Stages) {
		return ""
	}
	s := v.Stages[i]
	dead := ""
	if s.Dead > 0 {
		dead = fmt.Sprintf("%s dead", fmtCount(s.Dead))
	}
	eta := "ETA " + etaString(s.ETASeconds)
	if s.FinishedAt > 0 {
		eta = "done at " + clockString(s.FinishedAt)
	}
	return fmt.Sprintf(" %*s %-10s %8s/s  %-13s", countW, fmtCount(s.Finished())+"/"+fmtCount(s.Total), dead, fmt.Sprintf("%.1f", s.Rate), eta)
}

// statusText is the line under the bars, shortened to fit width.
func (p *progressPrinter) statusText(nameW, width int) string {
	v := p.view.Load()
	el := fmt.Sprintf("%-*s %s", nameW, "elapsed", clockString(v.Elapsed))
	a := v.api()
	if a == nil {
		return el
	}
	cost := 0.0
	for _, s := range v.Stages {
		cost += s.CostUSD
	}
	long := fmt.Sprintf("%s · %s: limit %d · in flight %d · 429s %.1f%% of %s calls · 5xx/timeouts %s · tokens %s in / %s out · est. $%.4f",
		el, a.Name, a.Limit, a.InFlight, a.Share429(), fmtCount(a.Calls), fmtCount(a.Transient), fmtCompact(a.TokensIn), fmtCompact(a.TokensOut), cost)
	if width <= 0 || len([]rune(long)) <= width {
		return long
	}
	return fmt.Sprintf("%s · limit %d · in flight %d · 429s %.1f%% · %s tok · $%.4f",
		el, a.Limit, a.InFlight, a.Share429(), fmtCompact(a.TokensIn+a.TokensOut), cost)
}

func (p *progressPrinter) updateBars(v *liveStatus) {
	for i, bar := range p.stageBars {
		s := v.Stages[i]
		bar.SetCurrent(s.Finished())
		// Totals only shrink (by upstream dead letters), so a stage that
		// finished them all is done for this run.
		bar.SetTotal(s.Total, s.Finished() >= s.Total)
	}
}

// publish writes the live status atomically (write then rename).
func (p *progressPrinter) publish(v *liveStatus) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.cfg.DBPath), ".status-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), liveStatusPath(p.cfg.DBPath)) != nil {
		os.Remove(tmp.Name())
	}
}

// close ends the display (the bars keep their last state on screen),
// stops the metrics server and removes the status file. Later ticks are
// ignored. Idempotent.
func (p *progressPrinter) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	if p.bars != nil {
		p.updateBars(p.view.Load())
		for _, b := range p.stageBars {
			b.Abort(false)
		}
		p.statusBar.Abort(false)
		p.bars.Wait()
		p.out.set(nil)
	}
	if p.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		p.metrics.shutdown(ctx)
		cancel()
	}
	os.Remove(liveStatusPath(p.cfg.DBPath))
}

// switchWriter writes to an override while one is set (the bars, which
// print it above themselves), else to w.
type switchWriter struct {
	mu       sync.Mutex
	w        io.Writer
	override io.Writer
}

func (s *switchWriter) set(o io.Writer) {
	s.mu.Lock()
	s.override = o
	s.mu.Unlock()
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.override != nil {
		if n, err := s.override.Write(b); err == nil {
			return n, nil
		}
	}
	return s.w.Write(b)
}

// rateWindow measures a stage's throughput over the last rateSpan.
type rateWindow struct {
	at []time.Time
	n  []int64
}

// add records that n items were finished by t and returns the rate per
// second over the window.
func (w *rateWindow) add(t time.Time, n int64) float64 {
	w.at, w.n = append(w.at, t), append(w.n, n)
	for len(w.at) > 2 && t.Sub(w.at[1]) >= rateSpan {
		w.at, w.n = w.at[1:], w.n[1:]
	}
	dt := t.Sub(w.at[0]).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(n-w.n[0]) / dt
}

// newRunMonitor sets up everything that watches one run: the logger, the
// bars or progress records on stderr, the live status file and, with
// --metrics-addr, the metrics server. Close it after the run.
func newRunMonitor(db *store.DB, b *built, runID string, quiet bool, obs obsOptions, stderr io.Writer) (*progressPrinter, error) {
	counts, err := db.Counts()
	if err != nil {
		return nil, err
	}
	out := &switchWriter{w: stderr}
	log, err := newLogger(out, obs.LogFormat, obs.LogLevel)
	if err != nil {
		return nil, err
	}
	cfg := progressConfig{DBPath: db.Path(), RunID: runID, Live: !quiet && isTerminal(stderr)}
	for _, s := range counts.Stages {
		cfg.Stages = append(cfg.Stages, s.Stage)
		cfg.Queued = append(cfg.Queued, int64(s.Queued))
		var lim pipeline.Limiter
		if b != nil {
			for _, sc := range b.stages {
				if sc.Stage.Name() == s.Stage && sc.Limiter != nil {
					lim = sc.Limiter
				}
			}
		}
		cfg.Limiters = append(cfg.Limiters, lim)
	}
	if b != nil {
		cfg.Cost = b.cost
	}
	p := newProgressPrinter(out, log, cfg)
	if obs.MetricsAddr != "" {
		m, err := startMetrics(obs.MetricsAddr, p, log)
		if err != nil {
			p.close()
			return nil, err
		}
		p.metrics = m
		p.setMetricsURL(m.url)
		log.Info("serving metrics", "url", m.url)
	}
	// Published at once, so that `status` answers from the first second.
	p.publish(p.view.Load())
	return p, nil
}

// printSummary prints the run summary: per-stage accounting, the limit's
// range, dead letters by reason, the wall time and where to look next.
func printSummary(w io.Writer, db *store.DB, sum pipeline.RunSummary, asJSON bool) error {
	wall := sum.Ended.Sub(sum.Started)
	if asJSON {
		type stageTotals struct {
			Calls       int64          `json:"calls"`
			RateLimited int64          `json:"rate_limited"`
			Transient   int64          `json:"transient"`
			Dead        int64          `json:"dead"`
			Usage       pipeline.Usage `json:"usage"`
			CostUSD     float64        `json:"cost_usd"`
		}
		all := sum.Totals()
		t := stageTotals{Calls: all.Calls, RateLimited: all.RateLimited, Transient: all.Transient, Dead: all.Dead, Usage: all.Usage, CostUSD: all.CostUSD}
		return writeJSON(w, struct {
			pipeline.RunSummary
			WallSeconds float64     `json:"wall_seconds"`
			Totals      stageTotals `json:"totals"`
		}{sum, wall.Seconds(), t})
	}
	fmt.Fprintf(w, "\nrun %s: %s in %s", sum.ID, sum.Status, wall.Round(100*time.Millisecond))
	if sum.Message != "" {
		fmt.Fprintf(w, " (%s)", sum.Message)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tdone\tdead\tattempts\tcalls\t429s\t5xx/timeouts\ttokens in\ttokens out\test. cost\t")
	for _, name := range summaryStages(db, sum) {
		s := sum.Stages[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t$%.4f\t\n", name, s.Done, s.Dead, s.Attempts, s.Calls, s.RateLimited, s.Transient,
			s.Usage.PromptTokens, s.Usage.CandidateTokens, s.CostUSD)
	}
	total := sum.Totals()
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t$%.4f\t\n", total.Dead, total.Attempts, total.Calls, total.RateLimited, total.Transient,
		total.Usage.PromptTokens, total.Usage.CandidateTokens, total.CostUSD)
	tw.Flush()
	for _, name := range summaryStages(db, sum) {
		if s := sum.Stages[name]; s.LimitMax > 0 && s.Calls > 0 {
			fmt.Fprintf(w, "%s: 429 share %.2f%% of %d calls; concurrency limit ranged %d..%d, ended at %d\n",
				name, 100*float64(s.RateLimited)/float64(s.Calls), s.Calls, s.LimitMin, s.LimitMax, s.LimitEnd)
		}
	}
	for _, name := range summaryStages(db, sum) {
		s := sum.Stages[name]
		if len(s.DeadReasons) == 0 {
			continue
		}
		fmt.Fprintf(w, "dead letters at %s this run:\n", name)
		type kv struct {
			k string
			v int
		}
		var reasons []kv
		for k, v := range s.DeadReasons {
			reasons = append(reasons, kv{k, v})
		}
		sort.Slice(reasons, func(i, j int) bool {
			return reasons[i].v > reasons[j].v || reasons[i].v == reasons[j].v && reasons[i].k < reasons[j].k
		})
		for i, r := range reasons {
			if i == 8 {
				fmt.Fprintf(w, "  ... %d more reasons\n", len(reasons)-8)
				break
			}
			fmt.Fprintf(w, "  %5d  %s\n", r.v, r.k)
		}
	}
	p := db.Path()
	fmt.Fprintf(w, "\nnext: sawtooth status --db %s | sawtooth dlq list --db %s | sawtooth report --db %s --format html -o report.html\n", p, p, p)
	return nil
}

// summaryStages is the stages of sum in pipeline order.
func summaryStages(db *store.DB, sum pipeline.RunSummary) []string {
	var out []string
	for _, s := range db.Stages() {
		if sum.Stages[s.Name] != nil {
			out = append(out, s.Name)
		}
	}
	return out
}

// Formatting helpers for the live figures.

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Second) }

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
func round4(x float64) float64 { return float64(int64(x*1e4+0.5)) / 1e4 }

// etaString formats an ETA in seconds as m:ss or h:mm:ss; "?" when unknown.
func etaString(s float64) string {
	if s < 0 {
		return "?"
	}
	return clockString(s)
}

func clockString(s float64) string {
	t := int64(s + 0.5)
	if t >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", t/3600, t/60%60, t%60)
	}
	return fmt.Sprintf("%d:%02d", t/60, t%60)
}

// fmtCount formats n with thousands separators.
func fmtCount(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + fmtCount(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtCompact formats a token count: 52310 -> "52.3k".
func fmtCompact(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprint(n)
	}
}
