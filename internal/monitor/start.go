package monitor

import (
	"io"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// RunConfig is what Start needs to know about one run, as values: the
// database path, the run's id and, per stage in pipeline order, its name,
// how many items were queued there when the run started, and its limiter.
type RunConfig struct {
	DBPath string
	RunID  string
	// Stages are the stage names in pipeline order; Queued how many items
	// were queued at each when the run started.
	Stages []string
	Queued []int64
	// Before is how many items had left each stage (an output or a dead
	// letter there) before the run: on a resume the bars count against
	// the whole pipeline, not only this run's share.
	Before []int64
	// Limiters are the stages' limiters by index (nil: none), read for
	// the limit before the runner's first tick and by the metrics live.
	Limiters []pipeline.Limiter
	// Cost estimates the USD cost of a usage; nil means free.
	Cost func(pipeline.Usage) float64
	// StageCost, when set, is Cost for one stage (each LLM stage of a
	// job has its own model and prices); it wins over Cost.
	StageCost func(stage string, u pipeline.Usage) float64
	// Quiet turns the bars off even on a terminal, and the periodic
	// progress records with them (--quiet; Options.Quiet does the same).
	Quiet bool
	// BudgetUSD is the run's spending cap (--budget), 0 for none.
	BudgetUSD float64
}

// Start sets up everything that watches one run: the logger, the bars on
// a terminal (stderr) or progress records elsewhere, the live status file
// and, with opts.MetricsAddr, the metrics server. Close the Progress after
// the run. An error is a bad option (log format or level, metrics
// address); nothing is left running then.
//
// Quiet (either opts' or rc's) leaves stderr only the warnings and errors
// the run logs: a cron job's log then holds what needs reading.
func Start(stderr io.Writer, opts Options, rc RunConfig) (*Progress, error) {
	out := NewSwitchWriter(stderr)
	opts.Quiet = opts.Quiet || rc.Quiet
	rc.Quiet = opts.Quiet
	log, err := opts.Logger(out)
	if err != nil {
		return nil, err
	}
	cfg := Config{RunConfig: rc, Live: !rc.Quiet && IsTerminal(stderr), Now: opts.Now}
	p := NewProgress(out, log, cfg)
	if opts.MetricsAddr != "" {
		m, err := startMetrics(opts.MetricsAddr, p, log)
		if err != nil {
			p.Close()
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
