package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// loadConfig applies the --config file: a YAML mapping of flag names to
// values, each the default of that flag (the command line and SAWTOOTH_*
// variables win). It is strict: an unknown key, a nested mapping, a line
// indented under a key (which YAML would silently fold into its value)
// or a value the flag refuses is a usage error naming the file, the line
// and what to write instead.
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
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if strings.Contains(msg, "mapping values are not allowed") {
			msg += " (is a `flag: value` line indented under another? start every key in the first column)"
		}
		return usagef("config file %s: %s", path, msg)
	}
	if len(doc.Content) == 0 {
		return nil // empty, or only comments
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return usagef("config file %s, line %d: want one `flag: value` line per flag, e.g. `model: gemini-2.5-flash`", path, root.Line)
	}
	flags := map[string]cli.Flag{}
	var names []string
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			if n == "config" || n == "help" || n == "h" {
				continue
			}
			flags[n] = f
			names = append(names, n)
		}
	}
	sort.Strings(names)
	lines := strings.Split(string(data), "\n")
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		where := fmt.Sprintf("config file %s, line %d", path, k.Line)
		f, ok := flags[k.Value]
		if !ok {
			if k.Value == "config" {
				return usagef("%s: a config file cannot name another one", where)
			}
			return usagef("%s: unknown key %q%s (keys are the flag names of `sawtooth %s`; see its --help)",
				where, k.Value, didYouMean(k.Value, names, "%q"), c.Command.FullName())
		}
		next := len(lines) + 1
		if i+2 < len(root.Content) {
			next = root.Content[i+2].Line
		}
		values, err := configValues(k, v, lines, next)
		if err != nil {
			return usagef("%s: %v", where, err)
		}
		name := f.Names()[0]
		if c.IsSet(name) {
			continue // the command line or the environment wins
		}
		if _, slice := f.(*cli.StringSliceFlag); !slice && len(values) != 1 {
			return usagef("%s: %s takes one value, not a list", where, k.Value)
		}
		for _, val := range values {
			if err := c.Set(name, val); err != nil {
				return usagef("%s: %s: %v", where, k.Value, err)
			}
		}
	}
	return nil
}

// configValues is the value of key k: one scalar, or a list of scalars.
// Lines between k's line and the next key's (next) must be list items,
// a quoted or block value, blank or comments: anything else was indented
// by mistake, and YAML would have read it as part of k's value.
func configValues(k, v *yaml.Node, lines []string, next int) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Style == 0 || v.Style == yaml.TaggedStyle {
			for ln := k.Line + 1; ln < next && ln <= len(lines); ln++ {
				t := strings.TrimSpace(lines[ln-1])
				if t != "" && !strings.HasPrefix(t, "#") {
					return nil, fmt.Errorf("line %d is indented under %q, so it would be read as part of its value: start it in the first column as its own `flag: value` line, or join it to the value", ln, k.Value)
				}
			}
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		var out []string
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s: line %d: a list item must be a plain value", k.Value, item.Line)
			}
			out = append(out, item.Value)
		}
		return out, nil
	case yaml.MappingNode:
		return nil, fmt.Errorf("%s takes a value, not nested keys (is a line under it indented by mistake?)", k.Value)
	default:
		return nil, fmt.Errorf("%s: unsupported value (write a plain value or a list)", k.Value)
	}
}
