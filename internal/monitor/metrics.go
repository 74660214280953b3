package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The run's metrics. Counters count this run (they start at zero when the
// process starts); gauges are the latest figures, refreshed about once a
// second by the runner's tick.
var (
	metricItems = prometheus.NewDesc("sawtooth_items_total",
		"Items that left a stage in this run, by final state: done (output committed) or dead (dead letter).",
		[]string{"stage", "state"}, nil)
	metricQueued = prometheus.NewDesc("sawtooth_items_queued",
		"Items waiting at a stage or being processed there.",
		[]string{"stage"}, nil)
	metricExpected = prometheus.NewDesc("sawtooth_items_expected",
		"Items this run expects a stage to finish: those queued at it or upstream when the run started, less upstream dead letters.",
		[]string{"stage"}, nil)
	metricCalls = prometheus.NewDesc("sawtooth_calls_total",
		"Stage calls in this run by outcome: ok, rate_limited (429), transient (5xx, timeout; retried), unavailable (no connection; waits), permanent, fatal, canceled.",
		[]string{"stage", "outcome"}, nil)
	metricLimit = prometheus.NewDesc("sawtooth_concurrency_limit",
		"Current concurrency limit of a stage's AIMD limiter.",
		[]string{"stage"}, nil)
	metricInFlight = prometheus.NewDesc("sawtooth_in_flight",
		"Calls in flight at a stage.",
		[]string{"stage"}, nil)
	metricTokens = prometheus.NewDesc("sawtooth_tokens_total",
		"Tokens billed in this run, by direction: input (prompt), output (candidates), or cached_input (the part of input billed at the implicit-cache rate).",
		[]string{"stage", "direction"}, nil)
	metricCost = prometheus.NewDesc("sawtooth_cost_usd_total",
		"Estimated cost in US dollars of this run's calls at the configured prices.",
		[]string{"stage"}, nil)
	metricCached = prometheus.NewDesc("sawtooth_cached_answers_total",
		"Answers reused in this run without a call: the same question answered before in this database, or by a twin in flight.",
		[]string{"stage"}, nil)
	metricSaved = prometheus.NewDesc("sawtooth_saved_usd_total",
		"US dollars the cached answers of this run would have cost at the configured prices.",
		[]string{"stage"}, nil)
	metricTierCalls = prometheus.NewDesc("sawtooth_tier_calls_total",
		"Billed calls in this run by the service tier that served them (x-gemini-service-tier).",
		[]string{"stage", "tier"}, nil)
	metricTierShed = prometheus.NewDesc("sawtooth_tier_shed_total",
		"Calls in this run a service tier refused or left unanswered (flex sheds), retried without spending an attempt.",
		[]string{"stage", "tier"}, nil)
	metricTierCost = prometheus.NewDesc("sawtooth_tier_cost_usd_total",
		"US dollars this run's calls were billed, by the service tier that served them, at its rate.",
		[]string{"stage", "tier"}, nil)
	metricTierSaved = prometheus.NewDesc("sawtooth_tier_saved_usd",
		"US dollars a service tier's calls in this run cost less than on standard; a gauge, as it is negative for priority, which costs more.",
		[]string{"stage", "tier"}, nil)
	metricTierLatency = prometheus.NewDesc("sawtooth_tier_latency_seconds",
		"Latency of this run's billed calls by the service tier that served them (quantiles within about 1%).",
		[]string{"stage", "tier"}, nil)
	metricBudgetLeft = prometheus.NewDesc("sawtooth_budget_left_usd",
		"US dollars left of the run's --budget (absent without one).",
		nil, nil)
	metricRate = prometheus.NewDesc("sawtooth_items_per_second",
		"Items a stage finished per second over the last 10 seconds.",
		[]string{"stage"}, nil)
	metricElapsed = prometheus.NewDesc("sawtooth_run_elapsed_seconds",
		"Seconds since the run started.",
		[]string{"run_id"}, nil)
)

// progressCollector exports a Progress's latest figures, read at
// scrape time; it keeps no state of its own.
type progressCollector struct{ p *Progress }

var _ prometheus.Collector = progressCollector{}

func (c progressCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{metricItems, metricQueued, metricExpected, metricCalls, metricLimit,
		metricInFlight, metricTokens, metricCost, metricCached, metricSaved, metricBudgetLeft, metricRate, metricElapsed,
		metricTierCalls, metricTierShed, metricTierCost, metricTierSaved, metricTierLatency} {
		ch <- d
	}
}

func (c progressCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.p.Status()
	counter := func(d *prometheus.Desc, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, x, labels...)
	}
	gauge := func(d *prometheus.Desc, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, labels...)
	}
	gauge(metricElapsed, time.Since(v.Started).Seconds(), v.RunID)
	if budget := c.p.cfg.BudgetUSD; budget > 0 {
		spent := 0.0
		for _, s := range v.Stages {
			spent += s.CostUSD
		}
		gauge(metricBudgetLeft, max(0, budget-spent))
	}
	for i, s := range v.Stages {
		counter(metricItems, float64(s.Done), s.Name, "done")
		counter(metricItems, float64(s.Dead), s.Name, "dead")
		gauge(metricQueued, float64(s.Queued), s.Name)
		gauge(metricExpected, float64(s.Total), s.Name)
		gauge(metricRate, s.Rate, s.Name)
		for _, class := range pipeline.Classes {
			counter(metricCalls, float64(s.Outcomes[class]), s.Name, strings.ReplaceAll(string(class), "-", "_"))
		}
		limit, inFlight := s.Limit, s.InFlight
		if lim := c.p.limiter(i); lim != nil {
			limit, inFlight = lim.Limit(), lim.InFlight()
		}
		gauge(metricInFlight, float64(inFlight), s.Name)
		if limit > 0 {
			gauge(metricLimit, float64(limit), s.Name)
		}
		counter(metricTokens, float64(s.TokensIn), s.Name, "input")
		counter(metricTokens, float64(s.TokensOut), s.Name, "output")
		counter(metricCost, s.CostUSD, s.Name)
		counter(metricCached, float64(s.Cached), s.Name)
		counter(metricSaved, s.SavedUSD, s.Name)
		if s.TokensCached > 0 {
			counter(metricTokens, float64(s.TokensCached), s.Name, "cached_input")
		}
		collectTiers(ch, s.Name, s.Tiers)
	}
}

// collectTiers exports a stage's figures by service tier.
func collectTiers(ch chan<- prometheus.Metric, stage string, tiers map[string]*pipeline.TierStats) {
	for name, t := range tiers {
		for _, m := range []struct {
			d *prometheus.Desc
			x float64
		}{{metricTierCalls, float64(t.Calls)}, {metricTierShed, float64(t.Shed)}, {metricTierCost, t.CostUSD}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, m.x, stage, name)
		}
		ch <- prometheus.MustNewConstMetric(metricTierSaved, prometheus.GaugeValue, t.SavedUSD, stage, name)
		if l := t.Latency; l != nil && l.Count > 0 {
			ch <- prometheus.MustNewConstSummary(metricTierLatency, uint64(l.Count), l.Sum.Seconds(),
				map[float64]float64{0.5: t.P50Seconds, 0.95: t.P95Seconds, 0.99: l.Quantile(0.99).Seconds()}, stage, name)
		}
	}
}

// metricsServer serves /metrics over HTTP for the length of a run.
type metricsServer struct {
	srv  *http.Server
	url  string
	done chan struct{}
}

// startMetrics listens on addr (host:port; port 0 picks a free one) and
// serves the run's metrics, plus the Go runtime's and the process's.
func startMetrics(addr string, p *Progress, log *slog.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(progressCollector{p}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "sawtooth: metrics at /metrics")
	})
	m := &metricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		url:  "http://" + ln.Addr().String() + "/metrics",
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}()
	return m, nil
}

// shutdown stops the server, letting a scrape in progress finish until ctx
// is done.
func (m *metricsServer) shutdown(ctx context.Context) {
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
	<-m.done
}
