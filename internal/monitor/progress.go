package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Config configures a Progress: the run it watches (RunConfig; with
// Quiet nothing is logged as progress, and Start draws no bars), then
// how it shows it.
type Config struct {
	RunConfig
	// Live draws bars (for a terminal); otherwise, unless Quiet, the
	// progress is logged as an Info record every Every (default 5s).
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

// Progress shows a run's live figures: bars on a terminal, or periodic
// log records elsewhere. It also publishes them in the live status file
// beside the DB and backs the metrics. Tick is called by the runner about
// once a second; Close once after the run. Safe for concurrent use.
type Progress struct {
	cfg   Config
	log   *slog.Logger
	out   *SwitchWriter
	start time.Time
	view  atomic.Pointer[LiveStatus]

	mu         sync.Mutex // guards what follows
	rates      []rateWindow
	finishedAt []float64
	lastLog    time.Time
	metricsURL string
	closed     bool

	bars      *mpb.Progress
	stageBars []*mpb.Bar
	barStage  []int // the stage index of each of stageBars
	statusBar *mpb.Bar
	metrics   *metricsServer
}

// NewProgress starts showing a run's progress on out (Start also sets
// up the logger and the metrics). Log records
// should be written through out too (log is usually built on it): while
// the bars are live they are printed above them.
func NewProgress(out *SwitchWriter, log *slog.Logger, cfg Config) *Progress {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Progress{cfg: cfg, log: log, out: out, start: cfg.Now()}
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
func (p *Progress) Writer() io.Writer { return p.out }

// Status is the latest published figures.
//
// The value must not be modified.
func (p *Progress) Status() *LiveStatus { return p.view.Load() }

// setMetricsURL adds the metrics address to the published figures.
func (p *Progress) setMetricsURL(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metricsURL = u
	v := *p.view.Load()
	v.MetricsURL = u
	p.view.Store(&v)
}

// Tick takes the runner's figures: it updates the view, the bars, the
// status file and, every cfg.Every, logs a progress record.
func (p *Progress) Tick(pr pipeline.Progress) {
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
	if !p.cfg.Live && !p.cfg.Quiet && now.Sub(p.lastLog) >= p.cfg.Every {
		p.lastLog = now
		p.logProgress(v)
	}
}

// buildView derives the published figures from the runner's. Callers
// hold p.mu (or own p exclusively).
func (p *Progress) buildView(pr pipeline.Progress, now time.Time) *LiveStatus {
	v := &LiveStatus{PID: os.Getpid(), RunID: p.cfg.RunID, Started: p.start, Updated: now,
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
		var before int64
		if i < len(p.cfg.Before) {
			before = p.cfg.Before[i]
		}
		s := LiveStage{
			Name: name, Before: before, Total: max(queuedBefore-deadBefore, 0), Done: sp.Done, Dead: sp.Dead,
			Queued: max(queued+doneBefore-sp.Done-sp.Dead, 0),
			Calls:  sp.Calls, RateLimited: sp.RateLimited, Transient: sp.Transient, Unavailable: sp.Unavailable,
			Limit: sp.Limit, InFlight: sp.InFlight,
			TokensIn: sp.Usage.PromptTokens, TokensOut: sp.Usage.CandidateTokens, Tokens: sp.Usage.TotalTokens,
			ETASeconds: -1, Cached: sp.Cached, SavedUSD: sp.SavedUSD,
		}
		s.Outcomes = sp.Outcomes
		s.OK, s.Permanent = sp.Outcomes[pipeline.ClassOK], sp.Outcomes[pipeline.ClassPermanent]
		if lim := p.limiter(i); lim != nil && s.Limit == 0 {
			s.Limit = lim.Limit()
		}
		s.TokensCached, s.Tiers = sp.Usage.CachedTokens, sp.Tiers
		switch {
		case sp.CostUSD > 0:
			// What the calls were billed, each at the tier that served
			// it: a usage summed over tiers prices at one rate.
			s.CostUSD = sp.CostUSD
		case p.cfg.StageCost != nil:
			s.CostUSD = p.cfg.StageCost(name, sp.Usage)
		case p.cfg.Cost != nil:
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
func (p *Progress) limiter(i int) pipeline.Limiter {
	if i < len(p.cfg.Limiters) {
		return p.cfg.Limiters[i]
	}
	return nil
}

// logProgress writes one progress record: per stage finished/total, rate
// and ETA, and the API stage's limit, in-flight calls, 429 share, tokens
// and cost.
func (p *Progress) logProgress(v *LiveStatus) {
	attrs := []any{slog.String("elapsed", secs(v.Elapsed).String())}
	for _, s := range v.Stages {
		g := []any{"done", s.Done, "dead", s.Dead, "total", s.Total, "rate", round1(s.Rate), "eta", etaString(s.ETASeconds)}
		if s.Limit > 0 {
			g = append(g, "limit", s.Limit, "in_flight", s.InFlight, "calls", s.Calls, "r429_pct", round1(s.Share429()),
				"transient", s.Transient, "unavailable", s.Unavailable, "tokens_in", s.TokensIn, "tokens_out", s.TokensOut, "cost_usd", round4(s.CostUSD),
				"cached", s.Cached, "saved_usd", round4(s.SavedUSD))
		}
		attrs = append(attrs, slog.Group(s.Name, g...))
	}
	p.log.Info("progress", attrs...)
}

// startBars draws one bar per stage (finished/total, rate, ETA) and a line
// with the API stage's limit, in-flight calls, 429 share, tokens and cost.
func (p *Progress) startBars(w io.Writer) {
	opts := []mpb.ContainerOption{mpb.WithOutput(w), mpb.WithWidth(p.cfg.Width)}
	if p.cfg.Refresh != nil {
		opts = append(opts, mpb.WithManualRefresh(p.cfg.Refresh), mpb.ForceTTY())
	} else {
		opts = append(opts, mpb.WithRefreshRate(250*time.Millisecond))
	}
	p.bars = mpb.New(opts...)
	p.out.Set(p.bars)
	nameW := len("elapsed")
	for _, n := range p.cfg.Stages {
		nameW = max(nameW, len(n))
	}
	v := p.view.Load()
	countW := 0
	for _, s := range v.Stages {
		countW = max(countW, 2*len(fmtCount(s.Before+s.Total))+1)
	}
	for i, name := range p.cfg.Stages {
		if v.Stages[i].Before+v.Stages[i].Total == 0 {
			continue // nothing to show: no empty 0/0 bar
		}
		bar := p.bars.New(v.Stages[i].Before+v.Stages[i].Total,
			mpb.BarStyle().Lbound("│").Filler("█").Tip("█").Padding("░").Rbound("│"),
			mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return fmt.Sprintf("%-*s", nameW, name) })),
			mpb.AppendDecorators(decor.Any(func(st decor.Statistics) string {
				return p.stageText(i, countW)
			})),
			mpb.BarNoPop(),
		)
		p.stageBars = append(p.stageBars, bar)
		p.barStage = append(p.barStage, i)
	}
	p.statusBar = p.bars.New(1, mpb.NopStyle(),
		mpb.PrependDecorators(decor.Any(func(st decor.Statistics) string { return p.statusText(nameW, st.AvailableWidth) })),
	)
}

// stageText is what follows stage i's bar.
func (p *Progress) stageText(i, countW int) string {
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
	return fmt.Sprintf(" %*s %-10s %8s/s  %-13s", countW, fmtCount(s.Before+s.Finished())+"/"+fmtCount(s.Before+s.Total), dead, fmt.Sprintf("%.1f", s.Rate), eta)
}

// statusText is the line under the bars, shortened to fit width.
func (p *Progress) statusText(nameW, width int) string {
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
	long := fmt.Sprintf("%s · %s: limit %d · in flight %d · 429s %.1f%% of %s calls · 5xx/timeouts %s · unreachable %s · tokens %s in / %s out · est. $%.4f",
		el, a.Name, a.Limit, a.InFlight, a.Share429(), fmtCount(a.Calls), fmtCount(a.Transient), fmtCount(a.Unavailable), fmtCompact(a.TokensIn), fmtCompact(a.TokensOut), cost)
	if a.Cached > 0 {
		long += fmt.Sprintf(" · %s cached, $%.4f saved", fmtCount(a.Cached), a.SavedUSD)
	}
	if width <= 0 || len([]rune(long)) <= width {
		return long
	}
	return fmt.Sprintf("%s · limit %d · in flight %d · 429s %.1f%% · %s tok · $%.4f",
		el, a.Limit, a.InFlight, a.Share429(), fmtCompact(a.TokensIn+a.TokensOut), cost)
}

func (p *Progress) updateBars(v *LiveStatus) {
	for j, bar := range p.stageBars {
		s := v.Stages[p.barStage[j]]
		bar.SetCurrent(s.Before + s.Finished())
		// Totals only shrink (by upstream dead letters), so a stage that
		// finished them all is done for this run.
		bar.SetTotal(s.Before+s.Total, s.Finished() >= s.Total)
	}
}

// publish writes the live status atomically (write then rename); a
// failure only costs `status` its live answer, so it is not reported.
func (p *Progress) publish(v *LiveStatus) {
	if p.cfg.DBPath == "" {
		return // a database with no file (PostgreSQL): status reads it directly
	}
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
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), LiveStatusPath(p.cfg.DBPath)) != nil {
		os.Remove(tmp.Name())
	}
}

// Close ends the display (the bars keep their last state on screen),
// stops the metrics server and removes the status file. Later ticks are
// ignored. Idempotent.
func (p *Progress) Close() {
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
		p.out.Set(nil)
	}
	if p.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		p.metrics.shutdown(ctx)
		cancel()
	}
	if p.cfg.DBPath != "" {
		os.Remove(LiveStatusPath(p.cfg.DBPath))
	}
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

// Log is the run's logger: records go above the bars when they are live.
func (p *Progress) Log() *slog.Logger { return p.log }
