package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
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

// built is the wired pipeline for one command.
type built struct {
	defs     []store.StageDef
	stages   []pipeline.StageConfig
	sanitize *stages.Sanitize
	classify *stages.Classify
	agg      *stages.Aggregate
	limiter  *limiter.AIMD
	priceIn  float64
	priceOut float64
}

func fingerprint(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with plain structs
	}
	return b
}

// newStages builds the three stages and the pipeline definition (stage
// names and the fingerprint of what decides each stage's output).
func (o *pipelineOptions) newStages(ctx context.Context) (*built, error) {
	emoji, err := stages.ParseEmojiPolicy(o.Emoji)
	if err != nil {
		return nil, usagef("--emoji: %v", err)
	}
	if o.APIKey == "" {
		return nil, usagef("no API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment")
	}
	prompt := ""
	if o.PromptFile != "" {
		b, err := os.ReadFile(o.PromptFile)
		if err != nil {
			return nil, usagef("read --prompt-file: %v", err)
		}
		prompt = string(b)
	}
	cl, err := stages.NewClassify(ctx, stages.ClassifyConfig{
		APIKey: o.APIKey, BaseURL: o.BaseURL, Model: o.Model, Labels: o.Labels,
		PromptTemplate: prompt, Timeout: o.Timeout, MaxOutputTokens: o.MaxOutputTokens,
	})
	if err != nil {
		return nil, usagef("%v", err)
	}
	b := &built{
		sanitize: &stages.Sanitize{MaxChars: o.MaxChars, Emoji: emoji},
		classify: cl,
		agg:      &stages.Aggregate{GroupBy: o.GroupBy, DateField: o.DateField, RatingField: o.RatingField},
	}
	b.defs = []store.StageDef{
		{Name: b.sanitize.Name(), Fingerprint: fingerprint(o.MaxChars, emoji), Reads: []string{pipeline.TextField}},
		{Name: cl.Name(), Fingerprint: cl.Fingerprint(), Reads: classifyReads(prompt)},
		{Name: b.agg.Name(), Fingerprint: fingerprint(strings.Join(o.GroupBy, ","), o.DateField, o.RatingField), Config: mustJSON(b.agg), Reads: aggregateReads(b.agg)},
	}
	b.priceIn, b.priceOut = stages.Price(o.Model)
	if o.PriceIn >= 0 {
		b.priceIn = o.PriceIn
	}
	if o.PriceOut >= 0 {
		b.priceOut = o.PriceOut
	}
	return b, nil
}

// classifyReads is what an edit must touch to re-run classify: the text
// (its fallback when sanitize left none), and every field when a custom
// prompt template may print fields.
func classifyReads(prompt string) []string {
	if strings.Contains(prompt, "Fields") || strings.Contains(strings.ReplaceAll(prompt, " ", ""), "{{.}}") {
		return nil // may read any field
	}
	return []string{pipeline.TextField}
}

// aggregateReads lists the record fields the aggregate stage reads, so an
// edit to one of them re-runs only the aggregate.
func aggregateReads(a *stages.Aggregate) []string {
	groupBy := a.GroupBy
	if groupBy == nil {
		groupBy = stages.DefaultGroupBy
	}
	reads := append([]string{}, groupBy...)
	reads = append(reads, stages.MonthGroup, cmp.Or(a.DateField, stages.DefaultDateField), cmp.Or(a.RatingField, stages.DefaultRatingField))
	return reads
}

// openDB opens the pipeline DB for writing with this definition.
func (o *pipelineOptions) openDB(b *built) (*store.DB, error) {
	return store.Open(o.DB, store.Options{Stages: b.defs, MustExist: o.MustExist})
}

// wire builds the classify limiter (starting from the limit the last run
// learned, unless --start says otherwise) and the engine's stage configs.
func (o *pipelineOptions) wire(b *built, db *store.DB) {
	if o.Fixed > 0 {
		b.limiter = limiter.New(limiter.Config{Fixed: true, Start: o.Fixed, Floor: o.Fixed, Ceiling: o.Fixed, RPM: o.RPM, TPM: int64(o.TPM), PaceTPM: o.TPM > 0})
	} else {
		start := o.Start
		if start <= 0 {
			start = db.LearnedLimit(b.classify.Name())
		}
		b.limiter = limiter.New(limiter.Config{
			Start: start, Floor: o.Floor, Ceiling: o.Ceiling, DecreaseFactor: o.Decrease, Cooldown: o.Cooldown,
			TPM: int64(o.TPM), PaceTPM: o.TPM > 0, RPM: o.RPM,
		})
	}
	b.stages = []pipeline.StageConfig{
		{Stage: b.sanitize, Workers: o.Workers, MaxAttempts: 1},
		{Stage: b.classify, Workers: max(o.Ceiling, o.Fixed), Limiter: b.limiter, MaxAttempts: o.MaxAttempts, MaxWait: o.MaxWait, MaxOutage: o.MaxOutage},
		{Stage: b.agg, Workers: o.Workers, MaxAttempts: 1},
	}
}

// cost is the estimated USD for a usage at the configured prices.
func (b *built) cost(u pipeline.Usage) float64 {
	return (float64(u.PromptTokens)*b.priceIn + float64(u.CandidateTokens)*b.priceOut) / 1e6
}
