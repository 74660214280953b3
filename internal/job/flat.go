package job

import (
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// FlatEntry is one `key: value` line of a flat file (the older --config
// format, one flag per key).
type FlatEntry struct {
	// Key is the key as written; Line its 1-based line.
	Key  string
	Line int
	// Values is the value, or a list's items.
	Values []string
}

// DecodeFlat reads a flat YAML mapping of keys to scalars or lists of
// scalars (the older --config files) with the job file's strictness: a
// key not in valid (with the nearest valid one), a key given twice, a
// nested mapping, and a line indented under a plain value (which YAML
// would silently fold into it) are Errors naming file, line and key.
// An empty file (or only comments) has no entries.
func DecodeFlat(file string, data []byte, valid []string) ([]FlatEntry, error) {
	d := newDecoder(file)
	root := d.parse(data)
	if root == nil {
		return nil, d.result()
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root.Line, "", "want one `flag: value` line per flag, e.g. `model: gemini-2.5-flash`")
		return nil, d.result()
	}
	names := append([]string(nil), valid...)
	sort.Strings(names)
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	lines := strings.Split(string(data), "\n")
	seen := map[string]int{}
	var out []FlatEntry
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !known[k.Value] {
			d.errorf(k.Line, k.Value, "unknown key %q%s", k.Value, didYouMean(k.Value, names))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, k.Value, "given twice (first on line %d): keep one", first)
			continue
		}
		seen[k.Value] = k.Line
		next := len(lines) + 1
		if i+2 < len(root.Content) {
			next = root.Content[i+2].Line
		}
		e := FlatEntry{Key: k.Value, Line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Style == 0 || v.Style == yaml.TaggedStyle {
				for ln := k.Line + 1; ln < next && ln <= len(lines); ln++ {
					t := strings.TrimSpace(lines[ln-1])
					if t != "" && !strings.HasPrefix(t, "#") {
						d.errorf(ln, k.Value, "line %d is indented under %q, so it would be read as part of its value: start it in the first column as its own `flag: value` line, or join it to the value", ln, k.Value)
						break
					}
				}
			}
			e.Values = []string{v.Value}
		case yaml.SequenceNode:
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					d.errorf(item.Line, k.Value, "%s: a list item must be a plain value", k.Value)
					continue
				}
				e.Values = append(e.Values, item.Value)
			}
		case yaml.MappingNode:
			d.errorf(k.Line, k.Value, "%s takes a value, not nested keys (is a line under it indented by mistake?)", k.Value)
			continue
		default:
			d.errorf(k.Line, k.Value, "%s: unsupported value (write a plain value or a list)", k.Value)
			continue
		}
		out = append(out, e)
	}
	if err := d.result(); err != nil {
		return nil, err
	}
	return out, nil
}
