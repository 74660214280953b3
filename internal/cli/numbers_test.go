package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runCanceled runs the app on args with a context already canceled: the
// checks come first, and a command that got past them (a regression)
// stops at once instead of serving or calling out.
func runCanceled(args []string) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return NewApp(Config{Stdout: io.Discard, Stderr: io.Discard}).RunContext(ctx, args)
}

// Every float flag of every command has a rule: a new one cannot take
// NaN, Inf or a negative by default.
func TestNumberRules_EveryFloatFlag(t *testing.T) {
	app := NewApp(Config{Stdout: io.Discard, Stderr: io.Discard})
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				if _, ok := f.(*cli.Float64Flag); ok {
					if _, ruled := numberRules[f.Names()[0]]; !ruled {
						t.Errorf("%s %s --%s: a float flag with no rule in numberRules", path, c.Name, f.Names()[0])
					}
				}
			}
			walk(path+" "+c.Name, c.Subcommands)
		}
	}
	walk("sawtooth", app.Commands)
}

// A number a flag cannot mean, from the command line, the environment or
// a --config file, is a usage error naming the flag (or the file and
// line) and the value, and the run changes nothing: no database is
// created.
func TestRun_BadNumbersRefused(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jobFile, []byte("db: job.db\ninput: {path: "+input+"}\nstages:\n  - llm:\n      name: classify\n      output: {label: [bug, other]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "flags.yaml")
	if err := os.WriteFile(config, []byte("input: "+input+"\nbudget: NaN\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unitless := filepath.Join(dir, "unitless.yaml")
	if err := os.WriteFile(unitless, []byte("input: "+input+"\ntimeout: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GEMINI_API_KEY", "test-key")
	tests := []struct {
		name string
		args []string
		env  string // SAWTOOTH_BUDGET's value, when set
		want []string
	}{
		{name: "--budget NaN", args: []string{"--budget", "NaN"}, want: []string{"--budget NaN is not a number", "US dollars"}},
		{name: "--budget Inf", args: []string{"--budget", "Inf"}, want: []string{"--budget +Inf is not a number"}},
		{name: "--budget negative", args: []string{"--budget", "-1"}, want: []string{"--budget -1: want a number of US dollars"}},
		{name: "--budget-total -Inf", args: []string{"--budget-total", "-Inf"}, want: []string{"--budget-total -Inf is not a number"}},
		{name: "--price-in negative", args: []string{"--price-in", "-0.5"}, want: []string{"--price-in -0.5: want US dollars per million input tokens"}},
		{name: "--price-out NaN", args: []string{"--price-out", "nan"}, want: []string{"--price-out NaN is not a number"}},
		{name: "--decrease 1", args: []string{"--decrease", "1"}, want: []string{"--decrease 1: want a factor between 0 and 1"}},
		{name: "--decrease NaN", args: []string{"--decrease", "NaN"}, want: []string{"--decrease NaN is not a number"}},
		{name: "--confirm-above negative", args: []string{"--confirm-above", "-1"}, want: []string{"--confirm-above -1: want a number of items"}},
		{name: "--rating-range NaN", args: []string{"--rating-range", "NaN-5"}, want: []string{"--rating-range", `"NaN-5"`}},
		{name: "SAWTOOTH_BUDGET=NaN", env: "NaN", want: []string{"--budget NaN is not a number"}},
		{name: "a job file with --budget NaN", args: []string{"-f", jobFile, "--budget", "NaN"}, want: []string{"--budget NaN is not a number"}},
		{name: "a job file with --price-in negative", args: []string{"-f", jobFile, "--price-in", "-1"}, want: []string{"--price-in"}},
		{name: "a config file's budget: NaN", args: []string{"--config", config}, want: []string{"config file " + config + ", line 2: budget NaN is not a number"}},
		// The flag package says only "parse error".
		{name: "--timeout without a unit", args: []string{"--timeout", "5"}, want: []string{`--timeout "5": want a duration with its unit, e.g. 30s`}},
		{name: "--workers in words", args: []string{"--workers", "many"}, want: []string{`--workers "many": want a whole number`}},
		// A whole number too large for the flag is not "not a whole number".
		{name: "--workers too large", args: []string{"--workers", "99999999999999999999"}, want: []string{`"99999999999999999999" for --workers: value out of range`}},
		{name: "--no-cache=maybe", args: []string{"--no-cache=maybe"}, want: []string{`--no-cache "maybe": want true or false`}},
		{name: "a config file's timeout: 5", args: []string{"--config", unitless}, want: []string{"config file " + unitless + `, line 2: timeout "5": want a duration with its unit`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("SAWTOOTH_BUDGET", tt.env)
			}
			db := filepath.Join(t.TempDir(), "run.db")
			args := append([]string{"sawtooth", "run", "--db", db}, tt.args...)
			if !strings.Contains(strings.Join(tt.args, " "), "-f ") && !strings.Contains(strings.Join(tt.args, " "), "--config") {
				args = append(args, "--input", input)
			}
			err := runCanceled(args)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("run %v: %v, want a usage error (exit 2)", tt.args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, p := range []string{db, filepath.Join(dir, "job.db")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("the refused run created %s", p)
				}
			}
		})
	}
}

// The simulator's rates and shapes are refused the same way, before it
// listens.
func TestSim_BadNumbersRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault-500", "NaN"}, "--fault-500 NaN is not a number"},
		{[]string{"--fault-503", "1.5"}, "--fault-503 1.5: want a rate from 0 to 1"},
		{[]string{"--batch-row-errors", "-0.1"}, "--batch-row-errors -0.1: want a rate"},
		{[]string{"--latency-tail", "-1"}, "--latency-tail -1: want a Pareto shape"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := runCanceled(append([]string{"sawtooth", "sim", "--addr", "127.0.0.1:0"}, tt.args...))
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("sim %v: %v, want a usage error saying %q", tt.args, err, tt.want)
			}
		})
	}
}
