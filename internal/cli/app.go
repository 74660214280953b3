package cli

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// Config is what the process gives the commands.
type Config struct {
	// Stdout gets data (summaries, reports, exports); Stderr progress,
	// notices and errors.
	Stdout, Stderr io.Writer
	// DemoReviews is the JSONL input `sawtooth demo` drains.
	DemoReviews []byte
	// ExitNow ends the process at once with err's exit code: a second
	// Ctrl-C during a run. Nil means return normally instead.
	ExitNow func(err error)
	// Environ lists the environment as KEY=value; nil means os.Environ.
	// Only read to warn about SAWTOOTH_* variables no flag reads.
	Environ func() []string
	// Confirm asks the user a yes/no question (a re-run above
	// --confirm-above without --yes); nil means no one can answer, as
	// when stdin is not a terminal. NewApp's default asks on the terminal.
	Confirm func(question string) bool
	// Now is the clock of a run's progress display (the records every
	// 5 s of it when stderr is no terminal); nil means time.Now. Tests
	// step it instead of waiting.
	Now func() time.Time
}

// NewApp assembles every command. Errors come back from Run unprinted and
// typed (see the package doc): the caller prints them once and maps them
// to an exit code.
func NewApp(cfg Config) *cli.App {
	if cfg.ExitNow == nil {
		cfg.ExitNow = func(error) {}
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ
	}
	if cfg.Confirm == nil {
		cfg.Confirm = terminalConfirm(os.Stdin, cfg.Stderr)
	}
	cmds := []*cli.Command{
		newRunCommand(cfg),
		newInitCommand(cfg),
		newPlanCommand(),
		newJobCommand(),
		newRetryCommand(cfg),
		newRerunCommand(cfg),
		newStatusCommand(),
		newDLQCommand(),
		newBatchCommand(),
		newExportCommand(),
		newReportCommand(),
		newVerifyCommand(),
		newCompactCommand(),
		newPruneCommand(cfg),
		newMigrateCommand(),
		newCopyCommand(),
		newSimCommand(),
		newDemoCommand(cfg),
		newBenchCommand(),
	}
	for _, c := range cmds {
		catchUsageErrors(c)
	}
	return &cli.App{
		Name:      "sawtooth",
		Usage:     "drain big batches of LLM work through a resumable pipeline, as fast as the live quota allows",
		Version:   buildVersion(),
		Writer:    cfg.Stdout,
		ErrWriter: cfg.Stderr,
		// Errors are printed once, by the caller, with their exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Before: func(c *cli.Context) error {
			if err := checkCommandName(c, cmds); err != nil {
				return err
			}
			warnUnknownEnv(cfg.Stderr, cfg.Environ(), cmds)
			return nil
		},
		Commands: cmds,
	}
}

// catchUsageErrors makes a flag that cannot be parsed a usage error in c
// and its subcommands (urfave/cli's own handler prints the whole help and
// returns a plain error), and so a number out of its flag's range (see
// checkNumbers), once c's own Before has read --config; and it words the
// pipeline's stops its action returns with the flags that change them
// (wordStops), and the store's errors with the commands that deal with
// them (wordStore).
func catchUsageErrors(c *cli.Command) {
	c.OnUsageError = onUsageError
	own := c.Before
	c.Before = func(ctx *cli.Context) error {
		if own != nil {
			if err := own(ctx); err != nil {
				return err
			}
		}
		return checkNumbers(ctx)
	}
	if act := c.Action; act != nil {
		c.Action = func(ctx *cli.Context) error { return wordStops(wordStore(act(ctx), commandDB(ctx))) }
	}
	for _, s := range c.Subcommands {
		catchUsageErrors(s)
	}
}

var undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)

// onUsageError turns a flag parsing error into a *UsageError that names
// the flag, suggests the nearest one and says where the flags are listed.
func onUsageError(c *cli.Context, err error, _ bool) error {
	name := commandPath(c)
	flags := c.App.Flags
	if c.Command != nil && c.Command.Name != "" {
		flags = c.Command.Flags
	}
	if m := undefinedFlag.FindStringSubmatch(err.Error()); m != nil {
		return usagef("unknown flag --%s%s (see %s --help)", m[1], flagSuggestion(m[1], flags), name)
	}
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		if want := wantedValue(flags, m[2]); want != "" && isParseError(err) {
			return usagef("--%s %q: want %s (see %s --help)", m[2], m[1], want, name)
		}
	}
	msg := strings.Replace(err.Error(), " for flag -", " for --", 1)
	return usagef("%s (see %s --help)", msg, name)
}

var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): `)

// isParseError reports whether the flag package could not read a value at
// all ("parse error"), not one it read and found too large ("value out of
// range"): only then is the value not what the flag takes.
func isParseError(err error) bool { return strings.HasSuffix(err.Error(), "parse error") }

// wantedValue says what the flag called name takes, for a value it could
// not parse: the flag package says only "parse error", and `--timeout 5`
// did not tell the user to write 5s. "" for a flag it has no words for.
func wantedValue(flags []cli.Flag, name string) string {
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		switch f.(type) {
		case *cli.DurationFlag:
			return "a duration with its unit, e.g. 30s, 5m or 1h30m"
		case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
			return "a whole number"
		case *cli.Float64Flag:
			return "a number"
		case *cli.BoolFlag:
			return "true or false"
		}
	}
	return ""
}

// commandPath is the command c runs as typed, "sawtooth job show" say.
// urfave/cli's FullName leaves the parent out while a subcommand's flags
// are parsed, which sent users to "sawtooth show --help".
func commandPath(c *cli.Context) string {
	var names []string
	for _, ctx := range c.Lineage() {
		if ctx.Command != nil && ctx.Command.Name != "" && ctx.Command.Name != c.App.Name && (len(names) == 0 || names[len(names)-1] != ctx.Command.Name) {
			names = append(names, ctx.Command.Name)
		}
	}
	slices.Reverse(names)
	return strings.Join(append([]string{"sawtooth"}, names...), " ")
}

// flagSuggestion is ": did you mean --X?" for the flag an unknown --name
// most likely meant: the one long name it begins (--out, --output), else
// the nearest long name. A one-letter alias is never suggested: --out was
// answered "did you mean --o?", two edits from -o.
func flagSuggestion(name string, flags []cli.Flag) string {
	var long, prefixed []string
	for _, n := range flagNames(flags) {
		if len(n) < 2 {
			continue
		}
		long = append(long, n)
		if len(name) > 1 && strings.HasPrefix(n, name) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return ": did you mean --" + prefixed[0] + "?"
	}
	return didYouMean(name, long, "--%s")
}

// flagNames is every name and alias of flags.
func flagNames(flags []cli.Flag) []string {
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	return names
}

// checkCommandName refuses an unknown command (or help topic) with the
// nearest one, before anything runs.
func checkCommandName(c *cli.Context, cmds []*cli.Command) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return nil
	}
	name := args[0]
	if name == "help" || name == "h" {
		if len(args) < 2 {
			return nil
		}
		name = args[1]
	}
	var names []string
	for _, cmd := range cmds {
		if cmd.HasName(name) {
			return nil
		}
		names = append(names, cmd.Name)
	}
	if strings.HasPrefix(name, "-") {
		return nil // a root flag: the parser has said what it thinks
	}
	return usagef("unknown command %q%s (sawtooth --help lists the commands)", name, didYouMean(name, names, "%s"))
}

// testVariables are the SAWTOOTH_* variables the project's test suites
// read (see e2e/doc.go, bench/doc.go): set while the binary runs under
// them, and no mistake.
var testVariables = map[string]bool{
	"SAWTOOTH_LONG": true, "SAWTOOTH_E2E_RACE": true, "SAWTOOTH_BENCH_1M": true, "SAWTOOTH_SCREENSHOT_DIR": true,
	"SAWTOOTH_REQUIRE_POSTGRES": true, "SAWTOOTH_REQUIRE_CHROMIUM": true, "SAWTOOTH_CHROMIUM": true,
	"SAWTOOTH_FLEET_BENCH": true, "SAWTOOTH_BENCH_POSTGRES": true, "SAWTOOTH_PG_TEST_CHILD_URL": true,
	"SAWTOOTH_LIBRARY_CHILD": true, "SAWTOOTH_LIBRARY_SIM": true,
}

// warnUnknownEnv warns about each SAWTOOTH_* variable in env that no
// flag of any command reads: a misspelt name is otherwise silently
// ignored.
func warnUnknownEnv(w io.Writer, env []string, cmds []*cli.Command) {
	known := map[string]bool{}
	var walk func([]*cli.Command)
	walk = func(cs []*cli.Command) {
		for _, c := range cs {
			for _, f := range c.Flags {
				if ef, ok := f.(interface{ GetEnvVars() []string }); ok {
					for _, e := range ef.GetEnvVars() {
						known[e] = true
					}
				}
			}
			walk(c.Subcommands)
		}
	}
	walk(cmds)
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "SAWTOOTH_") || known[k] || testVariables[k] {
			continue
		}
		fmt.Fprintf(w, "sawtooth: warning: the environment variable %s names no flag and is ignored%s\n", k, didYouMean(k, names, "%s"))
	}
}

// requireFlags returns an error naming the first of names that has no
// value from the command line, the environment or the --config file.
func requireFlags(c *cli.Context, names ...string) error {
	for _, n := range names {
		if c.IsSet(n) && c.Value(n) != nil && fmt.Sprint(c.Value(n)) != "" {
			continue
		}
		what := ""
		for _, f := range c.Command.Flags {
			if f.Names()[0] == n {
				if u, ok := f.(interface{ GetUsage() string }); ok {
					what = " (" + strings.NewReplacer(" (required)", "", "; required", "", "`", "").Replace(u.GetUsage()) + ")"
				}
			}
		}
		return usagef("missing --%s%s (see %s --help)", n, what, commandPath(c))
	}
	return nil
}

// before is a command's Before: read --config, then check that every
// flag in required has a value.
func before(required ...string) cli.BeforeFunc {
	return func(c *cli.Context) error {
		if err := loadConfig(c); err != nil {
			return err
		}
		return requireFlags(c, required...)
	}
}
