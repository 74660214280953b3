package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

// Flag categories, as --help groups them.
const (
	catDB       = "Database"
	catInput    = "Input"
	catSanitize = "Stage sanitize"
	catClassify = "Stage classify"
	catAgg      = "Stage aggregate"
	catEngine   = "Engine"
	catLimiter  = "Limiter"
	catCost     = "Cost"
	catOutput   = "Output"
	catRerun    = "Re-runs"
	catSim      = "Simulator"
	catBench    = "Benchmark"
	catDemo     = "Demo"
	catReport   = "Report"
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
	Tier            string
	FlexDeadline    time.Duration
	// flexTimeout bounds one flex call (no flag; the demo shortens it to
	// its time-scaled minutes); 0 means stages.DefaultFlexTimeout.
	flexTimeout time.Duration

	GroupBy     []string
	DateField   string
	RatingField string

	Workers     int
	MaxAttempts int
	Grace       time.Duration

	Start, Floor, Ceiling, Fixed int
	Decrease                     float64
	Cooldown, MaxWait, MaxOutage time.Duration
	MaxRefused                   time.Duration
	TPM, RPM                     int
	PriceIn, PriceOut            float64
	// NoCache calls every item, even one whose question was answered.
	NoCache bool
	// Budget and BudgetTotal cap the spend in USD: this run's, and the
	// database's lifetime (0: no cap).
	Budget, BudgetTotal float64

	// Lease, Heartbeat, Quota and QuotaKey apply to a PostgreSQL --db (a fleet).
	Lease     time.Duration
	Heartbeat time.Duration
	Quota     string
	QuotaKey  string

	RerunChanged bool
	MustExist    bool // retry, rerun: never create the DB
	JSON         bool
	Quiet        bool

	// prompt is the classify template text: read from PromptFile, or kept
	// from the DB (promptKept) when --prompt-file was not given.
	prompt     string
	promptKept bool
	// storedMode and storedBatch are how the stored job runs classify
	// (mode and batch settings), kept by retry and rerun: they run
	// online themselves, but the job they store keeps them for the
	// runs after. storedInput is the input file it names, kept by a
	// run given no --input: the job it stores still says where its
	// items came from.
	storedMode  string
	storedBatch *job.Batch
	storedInput job.Input

	// DryRun prints the re-run plan and changes nothing; Yes allows a
	// re-run of more than ConfirmAbove items.
	DryRun       bool
	Yes          bool
	ConfirmAbove int
	// Confirm asks on the terminal instead of stopping (nil: no terminal).
	Confirm func(question string) bool

	// KeepStored makes the settings whose flags were not given keep what
	// the DB recorded (retry, rerun: they act on items already paid for
	// under those settings), instead of taking the flag defaults.
	KeepStored bool

	// set says which flags were given (command line, environment or
	// --config), so a re-run can keep the stored value of the others.
	set map[string]bool
}

// dbUsage is the help of a --db naming a pipeline database, either kind.
const dbUsage = "the pipeline database, a bbolt file or a PostgreSQL one (a fleet's): `FILE|postgres://URL`"

// dbFlag is --db, the pipeline database every command but sim and bench
// needs (checked by requireFlags, after --config is read).
func dbFlag() cli.Flag {
	return &cli.StringFlag{Name: "db", Category: catDB, Usage: dbUsage + " (required)", EnvVars: []string{"SAWTOOTH_DB"}}
}

// configFlag is --config, read by loadConfig.
func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Category: catDB, Usage: "YAML `FILE` of flag: value lines giving any flag of this command (the command line and SAWTOOTH_* variables win over it)"}
}

// envOf is the SAWTOOTH_* variable of a flag.
func envOf(name string) []string {
	return []string{"SAWTOOTH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// pipelineFlags are the flags of every command that drains the pipeline.
// Each can also come from a SAWTOOTH_* variable or the --config file.
func pipelineFlags(o *pipelineOptions) []cli.Flag {
	env := envOf
	return append(fleetFlags(o), []cli.Flag{
		configFlag(),
		&cli.IntFlag{Name: "max-chars", Category: catSanitize, Value: stages.DefaultMaxChars, Usage: "truncate each text to this many characters", EnvVars: env("max-chars"), Destination: &o.MaxChars},
		&cli.StringFlag{Name: "emoji", Category: catSanitize, Value: "keep", Usage: "emoji policy: keep|strip|describe", EnvVars: env("emoji"), Destination: &o.Emoji},
		&cli.StringFlag{Name: "model", Category: catClassify, Value: stages.DefaultModel, Usage: "Gemini model", EnvVars: env("model"), Destination: &o.Model},
		&cli.StringFlag{Name: "base-url", Category: catClassify, Usage: "Gemini-compatible endpoint `URL`; with a job file, used in place of its base_url", DefaultText: "Google's", EnvVars: []string{"GOOGLE_GEMINI_BASE_URL"}, Destination: &o.BaseURL},
		&cli.StringSliceFlag{Name: "labels", Category: catClassify, Usage: "label set, comma-separated", DefaultText: strings.Join(stages.DefaultLabels, ","), EnvVars: env("labels")},
		&cli.StringFlag{Name: "prompt-file", Category: catClassify, Usage: "Go text/template `FILE` over the item (.ID .Text .Fields)", DefaultText: "the built-in prompt", EnvVars: env("prompt-file"), Destination: &o.PromptFile},
		&cli.DurationFlag{Name: "timeout", Category: catClassify, Value: 60 * time.Second, Usage: "per-request timeout", EnvVars: env("timeout"), Destination: &o.Timeout},
		&cli.IntFlag{Name: "max-output-tokens", Category: catClassify, Value: 256, Usage: "max output tokens per answer", EnvVars: env("max-output-tokens"), Destination: &o.MaxOutputTokens},
		&cli.StringFlag{Name: "tier", Category: catClassify, Value: stages.TierStandard, Usage: "service tier: standard, flex (half price, minutes; shed calls wait and ask again), priority, or auto (flex, then standard for items flex has not answered by --flex-deadline; flex with --flex-deadline is the same)", EnvVars: env("tier"), Destination: &o.Tier},
		&cli.DurationFlag{Name: "flex-deadline", Category: catClassify, Usage: "with --tier auto or flex: how long an item may stay on flex, from its first flex call, before it goes to standard (--tier flex without it stays on flex)", DefaultText: stages.DefaultFlexDeadline.String() + " with auto", EnvVars: env("flex-deadline"), Destination: &o.FlexDeadline},
		&cli.StringSliceFlag{Name: "group-by", Category: catAgg, Value: cli.NewStringSlice("app", "month"), Usage: "fields to count by, comma-separated (month derives from --date-field)", EnvVars: env("group-by")},
		&cli.StringFlag{Name: "date-field", Category: catAgg, Value: "date", Usage: "field holding the item's date", EnvVars: env("date-field"), Destination: &o.DateField},
		&cli.StringFlag{Name: "rating-field", Category: catAgg, Value: "rating", Usage: "numeric field averaged per label", EnvVars: env("rating-field"), Destination: &o.RatingField},
		&cli.IntFlag{Name: "workers", Category: catEngine, Value: 8, Usage: "workers per local (non-API) stage", EnvVars: env("workers"), Destination: &o.Workers},
		&cli.IntFlag{Name: "max-attempts", Category: catEngine, Value: 5, Usage: "attempts per item per stage for transient errors before dead-lettering", EnvVars: env("max-attempts"), Destination: &o.MaxAttempts},
		&cli.DurationFlag{Name: "grace", Category: catEngine, Value: 10 * time.Second, Usage: "on SIGINT/SIGTERM, how long in-flight calls may finish", EnvVars: env("grace"), Destination: &o.Grace},
		&cli.IntFlag{Name: "start", Category: catLimiter, Usage: "starting concurrency", DefaultText: "the limit learned by the last run (paced at the rate it learned), else 8", EnvVars: env("start"), Destination: &o.Start},
		&cli.IntFlag{Name: "floor", Category: catLimiter, Value: 1, Usage: "lowest concurrency", EnvVars: env("floor"), Destination: &o.Floor},
		&cli.IntFlag{Name: "ceiling", Category: catLimiter, Usage: "highest concurrency", DefaultText: fmt.Sprintf("%d (%d per worker on PostgreSQL)", limiter.DefaultCeiling, postgres.DefaultFleetCeiling), EnvVars: env("ceiling"), Destination: &o.Ceiling},
		&cli.IntFlag{Name: "fixed", Category: catLimiter, Usage: "a fixed pool of `N` calls, no adaptation (for comparisons)", DefaultText: "off", EnvVars: env("fixed"), Destination: &o.Fixed},
		&cli.Float64Flag{Name: "decrease", Category: catLimiter, Value: limiter.DefaultDecreaseFactor, Usage: "multiplicative decrease on a 429", EnvVars: env("decrease"), Destination: &o.Decrease},
		&cli.DurationFlag{Name: "cooldown", Category: catLimiter, Value: limiter.DefaultCooldown, Usage: "longest pause in growth after a decrease (shortened to 5 round trips once latency is measured)", EnvVars: env("cooldown"), Destination: &o.Cooldown},
		&cli.DurationFlag{Name: "max-wait", Category: catLimiter, Value: pipeline.DefaultMaxWait, Usage: "a 429 asking to wait longer than this stops the run (exit 3) instead of waiting", EnvVars: env("max-wait"), Destination: &o.MaxWait},
		&cli.DurationFlag{Name: "max-outage", Category: catLimiter, Value: pipeline.DefaultMaxOutage, Usage: "how long the API may stay unreachable (items wait, spending no attempts) before the run stops with exit 3; 30 s at most before the first success", EnvVars: env("max-outage"), Destination: &o.MaxOutage},
		&cli.DurationFlag{Name: "max-refused", Category: catLimiter, Value: pipeline.DefaultMaxRefused, Usage: "how long every call may be refused (429, no success) before the run stops with exit 3 as quota exhausted (resumable); a warning comes halfway; 0: never stop for refusals, wait for the quota", EnvVars: env("max-refused"), Destination: &o.MaxRefused},
		&cli.IntFlag{Name: "tpm", Category: catLimiter, Usage: "your tokens-per-minute quota: caps concurrency and paces calls", DefaultText: "unknown", EnvVars: env("tpm"), Destination: &o.TPM},
		&cli.IntFlag{Name: "rpm", Category: catLimiter, Usage: "your requests-per-minute quota: paces calls", DefaultText: "unknown", EnvVars: env("rpm"), Destination: &o.RPM},
		&cli.Float64Flag{Name: "price-in", Category: catCost, Value: -1, Usage: "USD per million input tokens", DefaultText: "the model's list price when known", EnvVars: env("price-in"), Destination: &o.PriceIn},
		&cli.Float64Flag{Name: "price-out", Category: catCost, Value: -1, Usage: "USD per million output tokens", DefaultText: "the model's list price when known", EnvVars: env("price-out"), Destination: &o.PriceOut},
		&cli.Float64Flag{Name: "budget", Category: catCost, Usage: "stop starting calls when the next would take this run's spend over `USD` (exit 3; a higher budget resumes)", DefaultText: "no cap", EnvVars: env("budget"), Destination: &o.Budget},
		&cli.Float64Flag{Name: "budget-total", Category: catCost, Usage: "the same cap, in `USD`, on the database's lifetime spend: every run's committed calls counted", DefaultText: "no cap", EnvVars: env("budget-total"), Destination: &o.BudgetTotal},
		&cli.BoolFlag{Name: "no-cache", Category: catCost, Usage: "call the API for every item, even one whose exact question (model, prompt, text, settings) this database has answered or a twin in flight is asking", EnvVars: env("no-cache"), Destination: &o.NoCache},
		&cli.BoolFlag{Name: "rerun-changed", Category: catRerun, Usage: "if a stage's configuration changed since the last run, re-run it and what follows", EnvVars: env("rerun-changed"), Destination: &o.RerunChanged},
		&cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print the run summary as JSON", EnvVars: env("json"), Destination: &o.JSON},
		&cli.BoolFlag{Name: "quiet", Category: catOutput, Aliases: []string{"no-progress"}, Usage: "for cron and services: stderr gets no progress bars, no periodic progress records and no info records, only warnings, errors (with the resume hint) and the ingest line; the run summary still goes to stdout", EnvVars: env("quiet"), Destination: &o.Quiet},
	}...)
}

// fromContext fills what flags cannot bind directly: the lists (split on
// commas), the default labels, the API key from the environment, and
// which flags were given.
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
	o.set = map[string]bool{}
	for _, n := range c.FlagNames() {
		if c.IsSet(n) {
			o.set[n] = true
		}
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

// rerunFlags are the flags of the commands that can re-run stages for
// items already paid for (run --rerun-changed, rerun; retry and demo
// take --rerun-changed too, so they get the confirmation without
// --dry-run).
func rerunFlags(o *pipelineOptions, dryRun bool) []cli.Flag {
	flags := []cli.Flag{
		&cli.BoolFlag{Name: "dry-run", Category: catRerun, Usage: "print what a re-run would re-pay (items, calls, tokens, cost, time) and change nothing", Destination: &o.DryRun},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Category: catRerun, Usage: "re-run even more than --confirm-above items", Destination: &o.Yes},
		&cli.IntFlag{Name: "confirm-above", Category: catRerun, Value: 100, Usage: "a re-run of more items than this stops and prints its plan unless --yes is given", EnvVars: envOf("confirm-above"), Destination: &o.ConfirmAbove},
	}
	if !dryRun {
		return flags[1:]
	}
	return flags
}

// inputOptions say where items come from.
type inputOptions struct {
	Path      string
	Format    string
	IDField   string
	TextField string
	MaxLine   int
	// MaxFieldLines, DateFormat and RatingRange are ingest.Options'.
	MaxFieldLines int
	DateFormat    string
	RatingRange   string
	// Names is how messages name these settings: the flags, or a job
	// file's keys.
	Names ingest.Names
}

// inputFormats are the values --format takes for an input file.
var inputFormats = []string{string(ingest.JSONL), string(ingest.CSV), string(ingest.TSV)}

// inputFlags are the flags of run that say where items come from.
func inputFlags(in *inputOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "input", Category: catInput, Aliases: []string{"i"}, Usage: "JSONL, CSV or TSV `FILE` of items to ingest (none: resume what the DB holds)", EnvVars: []string{"SAWTOOTH_INPUT"}, Destination: &in.Path},
		&cli.StringFlag{Name: "format", Category: catInput, Usage: "input format: " + strings.Join(inputFormats, "|"), DefaultText: "from the file extension", EnvVars: envOf("format"), Destination: &in.Format},
		&cli.StringFlag{Name: "id-field", Category: catInput, Value: "id", Usage: "field or column holding each item's id", EnvVars: envOf("id-field"), Destination: &in.IDField},
		&cli.StringFlag{Name: "text-field", Category: catInput, Value: "text", Usage: "field or column holding each item's text", EnvVars: envOf("text-field"), Destination: &in.TextField},
		&cli.IntFlag{Name: "max-line-bytes", Category: catInput, Value: ingest.DefaultMaxLineBytes, Usage: "longest input line read; longer lines are skipped and reported", EnvVars: envOf("max-line-bytes"), Destination: &in.MaxLine},
		&cli.IntFlag{Name: "max-field-lines", Category: catInput, Value: ingest.DefaultMaxFieldLines, Usage: "most lines one quoted CSV field may span; past it the quote is taken for a missing closing quote and only its line is skipped", EnvVars: envOf("max-field-lines"), Destination: &in.MaxFieldLines},
		&cli.StringFlag{Name: "date-format", Category: catInput, Usage: "Go time `LAYOUT` of the date field when it is none of the common ones, e.g. \"02/01/2006 15:04\"", DefaultText: "RFC 3339, 2006-01-02, 01/02/2006, 02.01.2006, Jan 2, 2006 or Unix seconds", EnvVars: envOf("date-format"), Destination: &in.DateFormat},
		&cli.StringFlag{Name: "rating-range", Category: catInput, Value: ingest.DefaultRatingRange, Usage: "`MIN-MAX` of the rating field; a line with a rating outside it, or not finite, is skipped and reported", EnvVars: envOf("rating-range"), Destination: &in.RatingRange},
	}
}

// obsFlags are the flags of every command that runs the pipeline, saying
// how it reports on itself while it runs.
func obsFlags(o *monitor.Options) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Category: catOutput, Value: "text", Usage: "log records on stderr as text|json (the periodic progress records too, when stderr is not a terminal and --quiet is not given)", EnvVars: []string{"SAWTOOTH_LOG_FORMAT"}, Destination: &o.LogFormat},
		&cli.StringFlag{Name: "log-level", Category: catOutput, Value: "info", Usage: "least severe log records shown: debug|info|warn|error (warn hides the periodic progress records)", EnvVars: []string{"SAWTOOTH_LOG_LEVEL"}, Destination: &o.LogLevel},
		&cli.StringFlag{Name: "metrics-addr", Category: catOutput, Usage: "serve Prometheus metrics at http://`ADDR`/metrics while the run lasts, e.g. 127.0.0.1:9090", DefaultText: "off", EnvVars: []string{"SAWTOOTH_METRICS_ADDR"}, Destination: &o.MetricsAddr},
	}
}

// stageUsage is the help of a --stage-like flag: what it is for, then the
// valid values.
func stageUsage(what string) string {
	return what + ": " + strings.Join(stageNames, "|")
}

// stageFlag is --stage, one of the pipeline's stages (required is only
// said in the help: requireFlags checks it).
func stageFlag(dest *string, what string, required bool) cli.Flag {
	u := stageUsage(what)
	if required {
		u += " (required)"
	}
	return &cli.StringFlag{Name: "stage", Category: catDB, Usage: u, Destination: dest}
}

// checkStage refuses a name that is not one of the pipeline's stages.
func checkStage(flag, name string) error {
	for _, s := range stageNames {
		if s == name {
			return nil
		}
	}
	return usagef("--%s %q is not a stage%s (the stages: %s)", flag, name, didYouMean(name, stageNames, "%s"), strings.Join(stageNames, ", "))
}
