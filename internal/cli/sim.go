package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/urfave/cli/v2"
)

// simOptions configure the Gemini simulator, for `sim` and `demo`.
type simOptions struct {
	Addr                       string
	Key                        string
	RPM, TPM, RPD              int
	Window, Day                time.Duration
	Schedule                   string
	Latency, PerToken, Jitter  time.Duration
	MaxConcurrent              int
	F500, F503, Hang, Malform  float64
	BlockPrompt, BlockCand, MT float64
	Seed                       int64
	QuotaModel, RetryInfo      string
	QuotaFailure, CapAnswer    string
	BurstReq, BurstTok         int
	CountRefused               bool
	OverloadEvery, OverloadFor time.Duration
	Tail                       float64
	LatencyMax, PerInFlight    time.Duration
	Credits                    int64
	Batch                      simBatchOptions
	FlexLatency, FlexJitter    time.Duration
	FlexCapacity               int
	FlexShed, PriorityStd      float64
	FlexShedAnswer             string
	CacheMin                   int
	CacheOff                   bool
}

// simFlags are the simulator's flags, with d's values as defaults.
func simFlags(o *simOptions, d simOptions) []cli.Flag {
	return append([]cli.Flag{
		&cli.IntFlag{Category: catSim, Name: "sim-rpm", Value: d.RPM, Usage: "simulator: requests per --sim-window (0 = unlimited)", Destination: &o.RPM},
		&cli.IntFlag{Category: catSim, Name: "sim-tpm", Value: d.TPM, Usage: "simulator: input tokens per --sim-window (0 = unlimited)", Destination: &o.TPM},
		&cli.IntFlag{Category: catSim, Name: "sim-rpd", Value: d.RPD, Usage: "simulator: requests per --sim-day (0 = unlimited)", Destination: &o.RPD},
		&cli.DurationFlag{Category: catSim, Name: "sim-window", Value: d.Window, Usage: "simulator: length of the window --sim-rpm and --sim-tpm count in (a minute on the real API; shorter makes a rehearsal quicker)", Destination: &o.Window},
		&cli.DurationFlag{Category: catSim, Name: "sim-day", Value: d.Day, Usage: "simulator: length of the window --sim-rpd counts in (a day on the real API)", Destination: &o.Day},
		&cli.StringFlag{Category: catSim, Name: "quota-schedule", Value: d.Schedule, Usage: "simulator: live quota as AT:PERCENT steps, e.g. 0s:100,30s:50,60s:100", Destination: &o.Schedule},
		&cli.DurationFlag{Category: catSim, Name: "latency", Value: d.Latency, Usage: "simulator: base latency", Destination: &o.Latency},
		&cli.DurationFlag{Category: catSim, Name: "latency-per-token", Value: d.PerToken, Usage: "simulator: latency per prompt token", Destination: &o.PerToken},
		&cli.DurationFlag{Category: catSim, Name: "jitter", Value: d.Jitter, Usage: "simulator: uniform latency jitter", Destination: &o.Jitter},
		&cli.IntFlag{Category: catSim, Name: "max-concurrent", Value: d.MaxConcurrent, Usage: "simulator: more requests in flight than this get 503 overloaded (0 = off)", Destination: &o.MaxConcurrent},
		&cli.Float64Flag{Category: catSim, Name: "fault-500", Value: d.F500, Usage: "simulator: rate of 500 INTERNAL", Destination: &o.F500},
		&cli.Float64Flag{Category: catSim, Name: "fault-503", Value: d.F503, Usage: "simulator: rate of 503 overloaded", Destination: &o.F503},
		&cli.Float64Flag{Category: catSim, Name: "fault-hang", Value: d.Hang, Usage: "simulator: rate of requests that never answer", Destination: &o.Hang},
		&cli.Float64Flag{Category: catSim, Name: "fault-malformed", Value: d.Malform, Usage: "simulator: rate of truncated 200 bodies", Destination: &o.Malform},
		&cli.Float64Flag{Category: catSim, Name: "fault-block-prompt", Value: d.BlockPrompt, Usage: "simulator: rate of promptFeedback safety blocks", Destination: &o.BlockPrompt},
		&cli.Float64Flag{Category: catSim, Name: "fault-block-candidate", Value: d.BlockCand, Usage: "simulator: rate of finishReason SAFETY", Destination: &o.BlockCand},
		&cli.Float64Flag{Category: catSim, Name: "fault-max-tokens", Value: d.MT, Usage: "simulator: rate of MAX_TOKENS cut-offs", Destination: &o.MT},
		&cli.Int64Flag{Category: catSim, Name: "seed", Value: d.Seed, Usage: "simulator: seed for faults and jitter", Destination: &o.Seed},
		&cli.StringFlag{Category: catSim, Name: "sim-quota-model", Value: orString(d.QuotaModel, string(geminisim.SlidingLog)), Usage: "simulator: how RPM and TPM are counted: sliding, fixed (reset at each window boundary) or bucket (token bucket)", Destination: &o.QuotaModel},
		&cli.IntFlag{Category: catSim, Name: "sim-burst", Value: d.BurstReq, Usage: "simulator: token bucket's burst in requests (0 = one window's RPM)", Destination: &o.BurstReq},
		&cli.IntFlag{Category: catSim, Name: "sim-burst-tokens", Value: d.BurstTok, Usage: "simulator: token bucket's burst in tokens (0 = one window's TPM)", Destination: &o.BurstTok},
		&cli.BoolFlag{Category: catSim, Name: "sim-count-refused", Value: d.CountRefused, Usage: "simulator: refused calls count against RPM and TPM too", Destination: &o.CountRefused},
		&cli.StringFlag{Category: catSim, Name: "sim-retry-info", Value: orString(d.RetryInfo, string(geminisim.RetryExact)), Usage: "simulator: a 429's retryDelay: exact, coarse (whole seconds, often late) or absent", Destination: &o.RetryInfo},
		&cli.StringFlag{Category: catSim, Name: "sim-quota-failure", Value: orString(d.QuotaFailure, string(geminisim.QuotaFailureFull)), Usage: "simulator: a 429's QuotaFailure: full, no-value (no quotaValue) or absent (Vertex style)", Destination: &o.QuotaFailure},
		&cli.StringFlag{Category: catSim, Name: "max-concurrent-answer", Value: orString(d.CapAnswer, string(geminisim.RefuseOverloaded)), Usage: "simulator: answer past --max-concurrent: 503 (overloaded) or 429 (bare, no details)", Destination: &o.CapAnswer},
		&cli.DurationFlag{Category: catSim, Name: "overload-every", Value: d.OverloadEvery, Usage: "simulator: period of 503 overload bursts (0 = none)", Destination: &o.OverloadEvery},
		&cli.DurationFlag{Category: catSim, Name: "overload-for", Value: d.OverloadFor, Usage: "simulator: length of each 503 overload burst", Destination: &o.OverloadFor},
		&cli.Float64Flag{Category: catSim, Name: "latency-tail", Value: d.Tail, Usage: "simulator: Pareto shape of a heavy latency tail, e.g. 1.2 (0 = none)", Destination: &o.Tail},
		&cli.DurationFlag{Category: catSim, Name: "latency-max", Value: d.LatencyMax, Usage: "simulator: cap on latency (0 = none)", Destination: &o.LatencyMax},
		&cli.DurationFlag{Category: catSim, Name: "latency-per-inflight", Value: d.PerInFlight, Usage: "simulator: latency added per other request in flight", Destination: &o.PerInFlight},
		&cli.Int64Flag{Category: catSim, Name: "sim-credits", Value: d.Credits, Usage: "simulator: calls the account's prepayment credits pay for; later calls get 429 \"Your prepayment credits are depleted\" (0 = never run out)", Destination: &o.Credits},
		&cli.DurationFlag{Category: catSim, Name: "sim-flex-latency", Value: d.FlexLatency, Usage: "simulator: base latency of calls served on flex (minutes on the real API; 0 = --latency)", Destination: &o.FlexLatency},
		&cli.DurationFlag{Category: catSim, Name: "sim-flex-jitter", Value: d.FlexJitter, Usage: "simulator: uniform jitter added to --sim-flex-latency", Destination: &o.FlexJitter},
		&cli.IntFlag{Category: catSim, Name: "sim-flex-capacity", Value: d.FlexCapacity, Usage: "simulator: flex calls served at once; more are shed (0 = unlimited)", Destination: &o.FlexCapacity},
		&cli.Float64Flag{Category: catSim, Name: "sim-flex-shed", Value: d.FlexShed, Usage: "simulator: fraction of flex calls shed even under --sim-flex-capacity", Destination: &o.FlexShed},
		&cli.StringFlag{Category: catSim, Name: "sim-flex-shed-answer", Value: orString(d.FlexShedAnswer, string(geminisim.Shed503)), Usage: "simulator: a shed flex call's answer: 503 (overloaded), 429 (bare) or 429-details (Help and RetryInfo, no quota)", Destination: &o.FlexShedAnswer},
		&cli.Float64Flag{Category: catSim, Name: "sim-priority-as-standard", Value: d.PriorityStd, Usage: "simulator: fraction of priority calls served (and billed) as standard", Destination: &o.PriorityStd},
		&cli.IntFlag{Category: catSim, Name: "sim-cache-min-tokens", Value: d.CacheMin, Usage: "simulator: shortest prompt prefix implicitly cached, in tokens (0 = 1024)", Destination: &o.CacheMin},
		&cli.BoolFlag{Category: catSim, Name: "sim-cache-off", Value: d.CacheOff, Usage: "simulator: no implicit caching (no cachedContentTokenCount)", Destination: &o.CacheOff},
	}, simBatchFlags(&o.Batch, d.Batch)...)
}

// config is the simulator configuration the options describe.
func (o *simOptions) config() (geminisim.Config, error) {
	sched, err := geminisim.ParseSchedule(o.Schedule)
	if err != nil {
		return geminisim.Config{}, usagef("--quota-schedule: %v", err)
	}
	bc, err := o.Batch.config()
	if err != nil {
		return geminisim.Config{}, err
	}
	cfg := geminisim.Config{
		Batch:  bc,
		APIKey: o.Key, RPM: o.RPM, TPM: o.TPM, RPD: o.RPD, Window: o.Window, Day: o.Day, Schedule: sched,
		Latency: geminisim.Latency{Base: o.Latency, PerToken: o.PerToken, Jitter: o.Jitter,
			Tail: o.Tail, Max: o.LatencyMax, PerInFlight: o.PerInFlight},
		MaxConcurrent: o.MaxConcurrent,
		Faults: geminisim.Faults{Err500: o.F500, Err503: o.F503, Hang: o.Hang, Malformed: o.Malform,
			BlockPrompt: o.BlockPrompt, BlockCandidate: o.BlockCand, MaxTokens: o.MT},
		Seed:       o.Seed,
		QuotaModel: geminisim.QuotaModel(o.QuotaModel), BurstRequests: o.BurstReq, BurstTokens: o.BurstTok,
		CountRefused: o.CountRefused, RetryInfo: geminisim.RetryInfoMode(o.RetryInfo),
		QuotaFailure:       geminisim.QuotaFailureMode(o.QuotaFailure),
		ConcurrencyRefusal: geminisim.ConcurrencyRefusal(o.CapAnswer),
		Overload:           geminisim.Overload{Every: o.OverloadEvery, For: o.OverloadFor},
		Credits:            o.Credits,
		Tiers: geminisim.TierConfig{
			FlexLatency:  geminisim.Latency{Base: o.FlexLatency, Jitter: o.FlexJitter},
			FlexCapacity: o.FlexCapacity, FlexShed: o.FlexShed,
			ShedAnswer:         geminisim.ShedAnswer(o.FlexShedAnswer),
			PriorityAsStandard: o.PriorityStd,
		},
		Cache: geminisim.CacheConfig{Off: o.CacheOff, MinTokens: o.CacheMin},
	}
	if err := cfg.Validate(); err != nil {
		return geminisim.Config{}, usagef("simulator: %v", err)
	}
	return cfg, nil
}

// orString is s, or def when s is empty.
func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func newSimCommand() *cli.Command {
	var o simOptions
	defaults := simOptions{Window: time.Minute, Day: 24 * time.Hour, Latency: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Seed: 1}
	return &cli.Command{
		Name:  "sim",
		Usage: "serve the Gemini-compatible simulator (quota, latency, faults) for rehearsals and tests",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Category: catSim, Name: "addr", Value: "127.0.0.1:8089", Usage: "listen address (loopback)", Destination: &o.Addr},
			&cli.StringFlag{Category: catSim, Name: "key", Value: geminisim.DefaultAPIKey, Usage: "the API key clients must send", Destination: &o.Key},
		}, simFlags(&o, defaults)...),
		Action: func(c *cli.Context) error {
			return runSim(c.Context, &o, c.App.Writer)
		},
	}
}

// runSim serves the simulator until ctx is done or a signal comes.
func runSim(ctx context.Context, o *simOptions, out io.Writer) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	srv := geminisim.New(cfg)
	url, err := srv.Start(o.Addr)
	if err != nil {
		return listenError(o.Addr, err)
	}
	defer srv.Close()
	fmt.Fprintf(out, "Gemini simulator listening.\n  export GOOGLE_GEMINI_BASE_URL=%s\n  export GEMINI_API_KEY=%s\n  stats: %s/_sim/stats\n", url, cfg.APIKey, url)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(ch)
	select {
	case <-ch:
	case <-ctx.Done():
	}
	return nil
}

// listenError words a failure to listen on --addr by what the user can
// change; it said "listen on X" three times, net's words last.
func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("sim: --addr %s is in use by another program: give another port, or --addr 127.0.0.1:0 for a free one", addr)
	}
	cause := err
	var op *net.OpError
	var bad *net.AddrError
	switch {
	case errors.As(err, &bad):
		cause = errors.New(bad.Err)
	case errors.As(err, &op) && op.Err != nil:
		cause = op.Err
	}
	return fmt.Errorf("sim: --addr %s: cannot listen there (%v): give an address of this machine and a port, e.g. 127.0.0.1:8089", addr, cause)
}
