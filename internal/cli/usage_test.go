package cli

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// A usage error points to the help of the command typed, subcommands
// included ("sawtooth job show --help", never "sawtooth show --help").
func TestUsageError_NamesTheCommandTyped(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"job", "show", "--yaml"}, "unknown flag --yaml (see sawtooth job show --help)"},
		{[]string{"dlq", "list", "--db", "x.db", "--sage", "classify"}, "(see sawtooth dlq list --help)"},
		{[]string{"dlq", "requeue", "--db", "x.db"}, "missing --stage (stage whose dead letters to re-queue: sanitize|classify|aggregate) (see sawtooth dlq requeue --help)"},
		{[]string{"batch", "cancel", "--db", "x.db", "--zz"}, "(see sawtooth batch cancel --help)"},
		{[]string{"run", "--bogus"}, "unknown flag --bogus (see sawtooth run --help)"},
		{[]string{"report", "--db", "x.db", "--out", "r.html"}, "unknown flag --out: did you mean --output? (see sawtooth report --help)"},
		{[]string{"report", "--db", "x.db", "--fromat", "csv"}, "unknown flag --fromat: did you mean --format? (see sawtooth report --help)"},
		{[]string{"init", "--forse"}, "unknown flag --forse: did you mean --force? (see sawtooth init --help)"},
		{[]string{"--bogus"}, "(see sawtooth --help)"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := runApp(append([]string{"sawtooth"}, tt.args...), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.HasSuffix(err.Error(), tt.want) {
				t.Fatalf("error %v, want a usage error ending %q", err, tt.want)
			}
		})
	}
}

// Every --db that takes a pipeline database says it takes a PostgreSQL
// URL as well as a bbolt file, in its help and in the missing --db error.
func TestDBFlag_HelpNamesPostgres(t *testing.T) {
	app := NewApp(Config{Stdout: io.Discard, Stderr: io.Discard})
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				// demo's --db is its own scratch file; bench's the URL it
				// measures.
				if f.Names()[0] != "db" || c.Name == "demo" || c.Name == "bench" {
					continue
				}
				u := f.(*cli.StringFlag).Usage
				if !strings.Contains(u, "FILE") || !strings.Contains(u, "postgres://URL") {
					t.Errorf("%s %s --db: usage %q names no FILE or postgres://URL", path, c.Name, u)
				}
			}
			walk(path+" "+c.Name, c.Subcommands)
		}
	}
	walk("sawtooth", app.Commands)
	var help bytes.Buffer
	if err := runApp([]string{"sawtooth", "status", "--help"}, &help, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(help.String(), "--db FILE|postgres://URL") {
		t.Errorf("status --help does not show --db FILE|postgres://URL:\n%s", help.String())
	}
	err := runApp([]string{"sawtooth", "status"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "missing --db (the pipeline database, a bbolt file or a PostgreSQL one (a fleet's): FILE|postgres://URL)") {
		t.Errorf("status without --db: %v, want the missing --db error to name both kinds", err)
	}
}

// urfave/cli shows a flag's first back-quoted word as its value's name,
// so a back-quoted command in a usage became the placeholder:
// "--batch-max-sends sawtooth dlq requeue". Back quotes in a usage hold
// a placeholder only (FILE, USD, N).
var firstBackQuoted = regexp.MustCompile("`([^`]*)`")

func TestFlagUsage_backQuotesHoldAPlaceholder(t *testing.T) {
	app := NewApp(Config{Stdout: io.Discard, Stderr: io.Discard})
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				df, ok := f.(cli.DocGenerationFlag)
				if !ok {
					continue
				}
				if m := firstBackQuoted.FindStringSubmatch(df.GetUsage()); m != nil && strings.Contains(m[1], " ") {
					t.Errorf("%s %s --%s: its value is shown as %q", path, c.Name, f.Names()[0], m[1])
				}
			}
			walk(path+" "+c.Name, c.Subcommands)
		}
	}
	walk("sawtooth", app.Commands)
}
