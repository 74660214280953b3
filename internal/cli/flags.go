package cli

import (
	"os"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
)

// pipelineOptions configure the stages, the engine and the limiter. They
// are shared by run, retry, rerun and demo.
type pipelineOptions struct {
	DB string

	MaxChars int
	Emoji    string

	Model           string
	BaseURL         string
	APIKey          string // from the environment only, never a flag
	Labels          []string
	PromptFile      string
	Timeout         time.Duration
	MaxOutputTokens int

	GroupBy     []string
	DateField   string
	RatingField string

	Workers     int
	MaxAttempts int
	Grace       time.Duration

	Start, Floor, Ceiling, Fixed int
	Decrease                     float64
	Cooldown, MaxWait, MaxOutage time.Duration
	TPM, RPM                     int
	PriceIn, PriceOut            float64

	RerunChanged bool
	MustExist    bool // retry, rerun: never create the DB
	JSON         bool
	Quiet        bool
}

// dbFlag is --db, the pipeline database every command but sim and bench
// needs.
func dbFlag() cli.Flag {
	return &cli.StringFlag{Name: "db", Usage: "pipeline database `FILE` (bbolt)", EnvVars: []string{"SAWTOOTH_DB"}, Required: true}
}

// pipelineFlags are the flags of every command that drains the pipeline.
// Each can also come from a SAWTOOTH_* variable or the --config file.
func pipelineFlags(o *pipelineOptions) []cli.Flag {
	env := func(name string) []string {
		return []string{"SAWTOOTH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "YAML `FILE` with default values for any flag below"},
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-chars", Value: stages.DefaultMaxChars, Usage: "sanitize: truncate text to this many characters", EnvVars: env("max-chars"), Destination: &o.MaxChars}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "emoji", Value: "keep", Usage: "sanitize: emoji policy keep|strip|describe", EnvVars: env("emoji"), Destination: &o.Emoji}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "model", Value: stages.DefaultModel, Usage: "classify: Gemini model", EnvVars: env("model"), Destination: &o.Model}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "base-url", Usage: "classify: Gemini-compatible endpoint (default Google's)", EnvVars: []string{"GOOGLE_GEMINI_BASE_URL"}, Destination: &o.BaseURL}),
		altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: "labels", Usage: "classify: label set (comma-separated)", EnvVars: env("labels")}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "prompt-file", Usage: "classify: Go text/template `FILE` over the item (.ID .Text .Fields)", EnvVars: env("prompt-file"), Destination: &o.PromptFile}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "timeout", Value: 60 * time.Second, Usage: "classify: per-request timeout", EnvVars: env("timeout"), Destination: &o.Timeout}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-output-tokens", Value: 256, Usage: "classify: max output tokens per answer", EnvVars: env("max-output-tokens"), Destination: &o.MaxOutputTokens}),
		altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: "group-by", Value: cli.NewStringSlice("app", "month"), Usage: "aggregate: fields to count by (month derives from --date-field)", EnvVars: env("group-by")}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "date-field", Value: "date", Usage: "aggregate: field holding the item's date", EnvVars: env("date-field"), Destination: &o.DateField}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "rating-field", Value: "rating", Usage: "aggregate: numeric field averaged per label", EnvVars: env("rating-field"), Destination: &o.RatingField}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "workers", Value: 8, Usage: "workers per local (non-API) stage", EnvVars: env("workers"), Destination: &o.Workers}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-attempts", Value: 5, Usage: "attempts per item per stage for transient errors before dead-lettering", EnvVars: env("max-attempts"), Destination: &o.MaxAttempts}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "grace", Value: 10 * time.Second, Usage: "on SIGINT/SIGTERM, how long in-flight calls may finish", EnvVars: env("grace"), Destination: &o.Grace}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "start", Usage: "limiter: starting concurrency (default: the limit learned by the last run, else 8)", EnvVars: env("start"), Destination: &o.Start}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "floor", Value: 1, Usage: "limiter: lowest concurrency", EnvVars: env("floor"), Destination: &o.Floor}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "ceiling", Value: 64, Usage: "limiter: highest concurrency", EnvVars: env("ceiling"), Destination: &o.Ceiling}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "fixed", Usage: "limiter: a fixed pool of N calls, no adaptation (for comparisons)", EnvVars: env("fixed"), Destination: &o.Fixed}),
		altsrc.NewFloat64Flag(&cli.Float64Flag{Name: "decrease", Value: limiter.DefaultDecreaseFactor, Usage: "limiter: multiplicative decrease on a 429", EnvVars: env("decrease"), Destination: &o.Decrease}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "cooldown", Value: limiter.DefaultCooldown, Usage: "limiter: longest pause in growth after a decrease (shortened to 5 round trips once latency is measured)", EnvVars: env("cooldown"), Destination: &o.Cooldown}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "max-wait", Value: pipeline.DefaultMaxWait, Usage: "a 429 asking to wait longer than this stops the run (exit 3) instead of waiting", EnvVars: env("max-wait"), Destination: &o.MaxWait}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "max-outage", Value: pipeline.DefaultMaxOutage, Usage: "how long the API may stay unreachable (items wait, spending no attempts) before the run stops with exit 3; 30 s at most before the first success", EnvVars: env("max-outage"), Destination: &o.MaxOutage}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "tpm", Usage: "your tokens-per-minute quota: caps concurrency and paces calls", EnvVars: env("tpm"), Destination: &o.TPM}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "rpm", Usage: "your requests-per-minute quota: paces calls", EnvVars: env("rpm"), Destination: &o.RPM}),
		altsrc.NewFloat64Flag(&cli.Float64Flag{Name: "price-in", Value: -1, Usage: "USD per million input tokens (default: the model's list price when known)", EnvVars: env("price-in"), Destination: &o.PriceIn}),
		altsrc.NewFloat64Flag(&cli.Float64Flag{Name: "price-out", Value: -1, Usage: "USD per million output tokens (default: the model's list price when known)", EnvVars: env("price-out"), Destination: &o.PriceOut}),
		&cli.BoolFlag{Name: "rerun-changed", Usage: "if a stage's configuration changed since the last run, re-run it and what follows", Destination: &o.RerunChanged},
		&cli.BoolFlag{Name: "json", Usage: "print the run summary as JSON", Destination: &o.JSON},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"no-progress"}, Usage: "no progress lines on stderr", Destination: &o.Quiet},
	}
}

// loadConfigFile makes --config values the defaults of every altsrc flag.
func loadConfigFile(c *cli.Context) error {
	if c.String("config") == "" {
		return nil
	}
	return altsrc.InitInputSourceWithContext(c.Command.Flags, altsrc.NewYamlSourceFromFlagFunc("config"))(c)
}

// fromContext fills what flags cannot bind directly: the lists (split on
// commas), the default labels and the API key from the environment.
func (o *pipelineOptions) fromContext(c *cli.Context) {
	o.DB = c.String("db")
	o.Labels = splitList(c.StringSlice("labels"))
	o.GroupBy = splitList(c.StringSlice("group-by"))
	if len(o.Labels) == 0 {
		o.Labels = stages.DefaultLabels
	}
	o.APIKey = os.Getenv("GEMINI_API_KEY")
	if o.APIKey == "" {
		o.APIKey = os.Getenv("GOOGLE_API_KEY")
	}
}

// splitList splits every element of in on commas and drops empty parts.
func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// inputOptions say where items come from.
type inputOptions struct {
	Path      string
	Format    string
	IDField   string
	TextField string
	MaxLine   int
}

// inputFlags are the flags of run that say where items come from.
func inputFlags(in *inputOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: "JSONL or CSV `FILE` of items to ingest (optional when resuming)", EnvVars: []string{"SAWTOOTH_INPUT"}, Destination: &in.Path},
		&cli.StringFlag{Name: "format", Usage: "input format jsonl|csv|tsv (default: from the file extension)", Destination: &in.Format},
		&cli.StringFlag{Name: "id-field", Value: "id", Usage: "field or column holding each item's id", Destination: &in.IDField},
		&cli.StringFlag{Name: "text-field", Value: "text", Usage: "field or column holding each item's text", Destination: &in.TextField},
		&cli.IntFlag{Name: "max-line-bytes", Value: ingest.DefaultMaxLineBytes, Usage: "longest input line read; longer lines are skipped and reported", Destination: &in.MaxLine},
	}
}

// obsFlags are the flags of every command that runs the pipeline, saying
// how it reports on itself while it runs.
func obsFlags(o *monitor.Options) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log records on stderr as text|json (the periodic progress records too, when stderr is not a terminal or with --no-progress)", EnvVars: []string{"SAWTOOTH_LOG_FORMAT"}, Destination: &o.LogFormat},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "least severe log records shown: debug|info|warn|error (warn hides the periodic progress records)", EnvVars: []string{"SAWTOOTH_LOG_LEVEL"}, Destination: &o.LogLevel},
		&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics at http://`ADDR`/metrics while the run lasts, e.g. 127.0.0.1:9090", EnvVars: []string{"SAWTOOTH_METRICS_ADDR"}, Destination: &o.MetricsAddr},
	}
}

// stageFlag is --stage, one of the pipeline's stages.
func stageFlag(dest *string, required bool) cli.Flag {
	return &cli.StringFlag{Name: "stage", Usage: "stage: " + strings.Join(stageNames, "|"), Required: required, Destination: dest}
}
