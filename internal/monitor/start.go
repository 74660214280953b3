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
	Stages []string
	Queued []int64
	// Before is how many items had left each stage before the run.
	Before   []int64
	Limiters []pipeline.Limiter
	// Cost estimates the USD cost of a usage; nil means free.
	Cost func(pipeline.Usage) float64
	// Quiet turns the bars off even on a terminal (--no-progress).
	Quiet bool
}

// Start sets up everything that watches one run: the logger, the bars on
// a terminal (stderr) or progress records elsewhere, the live status file
// and, with opts.MetricsAddr, the metrics server. Close the Progress after
// the run. An error is a bad option (log format or level, metrics
// address); nothing is left running then.
func Start(stderr io.Writer, opts Options, rc RunConfig) (*Progress, error) {
	out := NewSwitchWriter(stderr)
	log, err := NewLogger(out, opts.LogFormat, opts.LogLevel)
	if err != nil {
		return nil, err
	}
	cfg := Config{DBPath: rc.DBPath, RunID: rc.RunID, Stages: rc.Stages, Queued: rc.Queued, Before: rc.Before, Limiters: rc.Limiters,
		Cost: rc.Cost, Live: !rc.Quiet && IsTerminal(stderr)}
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
