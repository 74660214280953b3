package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sawtooth-dev/sawtooth/internal/job"
)

// loadConfig applies the --config file: a YAML mapping of flag names to
// values, each the default of that flag (the command line and SAWTOOTH_*
// variables win). It is read by the job file's strict decoder
// (job.DecodeFlat): an unknown key, a nested mapping, a line indented
// under a key (which YAML would silently fold into its value) or a value
// the flag refuses is a usage error naming the file, the line and what to
// write instead. A note points to the job file, which supersedes it.
func loadConfig(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("config file %s: no such file", path)
	case err != nil:
		return usagef("config file %s: %v", path, err)
	}
	if c.App != nil && c.App.ErrWriter != nil {
		fmt.Fprintf(c.App.ErrWriter, "sawtooth: note: --config %s mirrors flags; a job file holds the whole job (stages, input, database): see `sawtooth init`, then `sawtooth %s -f JOB.yaml`\n", path, c.Command.Name)
	}
	flags := map[string]cli.Flag{}
	names := []string{"config"} // known, to refuse it by name below
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			if n == "config" || n == "help" || n == "h" {
				continue
			}
			flags[n] = f
			names = append(names, n)
		}
	}
	entries, err := job.DecodeFlat(path, data, names)
	var jes job.Errors
	if errors.As(err, &jes) {
		e := jes[0]
		hint := ""
		if strings.HasPrefix(e.Msg, "unknown key") {
			hint = fmt.Sprintf(" (keys are the flag names of `%s`; see its --help)", commandPath(c))
		}
		if msg, ok := strings.CutPrefix(e.Msg, "not valid YAML: "); ok {
			if i := strings.Index(msg, " (is a"); i >= 0 {
				msg = msg[:i] + " (is a `flag: value` line indented under another? start every key in the first column)"
			}
			return usagef("config file %s, line %d: %s", path, e.Line, msg)
		}
		return usagef("config file %s, line %d: %s%s", path, e.Line, e.Msg, hint)
	}
	if err != nil {
		return usagef("config file %s: %v", path, err)
	}
	for _, e := range entries {
		where := fmt.Sprintf("config file %s, line %d", path, e.Line)
		if e.Key == "config" {
			return usagef("%s: a config file cannot name another one", where)
		}
		f := flags[e.Key]
		name := f.Names()[0]
		if c.IsSet(name) {
			continue // the command line or the environment wins
		}
		if _, slice := f.(*cli.StringSliceFlag); !slice && len(e.Values) != 1 {
			return usagef("%s: %s takes one value, not a list", where, e.Key)
		}
		for _, val := range e.Values {
			if v, err := strconv.ParseFloat(val, 64); err == nil && isNumberFlag(f) {
				if err := checkNumber(where+": "+e.Key, name, v); err != nil {
					return err
				}
			}
			if err := c.Set(name, val); err != nil {
				if want := wantedValue([]cli.Flag{f}, name); want != "" && isParseError(err) {
					return usagef("%s: %s %q: want %s", where, e.Key, val, want)
				}
				return usagef("%s: %s: %v", where, e.Key, err)
			}
		}
	}
	return nil
}
