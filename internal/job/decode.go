package job

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a job file: where it is and what to do.
type Error struct {
	// File is the job file's path as given.
	File string
	// Line is the 1-based line of the key (or value) at fault; 0 when the
	// problem is the file as a whole.
	Line int
	// Key is the key's path, e.g. "stages[1].llm.model"; "" for the file.
	Key string
	// Msg says what is wrong and what to write instead.
	Msg string
	// Err, when set, is the sentinel the problem is (ErrEmpty), for
	// errors.Is.
	Err error
}

// ErrEmpty is the problem of a job file with nothing in it.
var ErrEmpty = errors.New("the file is empty")

// NoFileError is Load's error for a job file that does not exist; it is
// fs.ErrNotExist.
type NoFileError struct{ Path string }

func (e *NoFileError) Error() string { return fmt.Sprintf("job file %s: no such file", e.Path) }
func (e *NoFileError) Unwrap() error { return fs.ErrNotExist }

// Error is FILE:LINE: KEY: MESSAGE, leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one file, in line order.
type Errors []*Error

// Error is every problem's Error, one a line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap is every problem, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// decoder walks a YAML node tree into Go values, strictly.
type decoder struct {
	file string
	errs Errors
	// lines maps a key path to the line it was written on, for errors
	// found after decoding (validation).
	lines map[string]int
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, lines: map[string]int{}}
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// at is errorf for a key already decoded: its line comes from d.lines.
func (d *decoder) at(key, format string, args ...any) {
	d.errorf(d.line(key), key, format, args...)
}

// line is the line key was written on, or that of its nearest written
// parent (a default filled in has no line of its own).
func (d *decoder) line(key string) int {
	for k := key; k != ""; {
		if l, ok := d.lines[k]; ok {
			return l
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

func (d *decoder) result() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
	return d.errs
}

// parse reads data as one YAML document; a syntax error becomes an *Error
// with the parser's line.
func (d *decoder) parse(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if n, tail, ok := strings.Cut(rest, ": "); ok {
				if l, err := strconv.Atoi(n); err == nil {
					line, msg = l, tail
				}
			}
		}
		if strings.Contains(msg, "mapping values are not allowed") {
			msg += " (is a `key: value` line indented under a plain value? check the indentation)"
		}
		d.errorf(line, "", "not valid YAML: %s", msg)
		return nil
	}
	if len(doc.Content) == 0 {
		return nil
	}
	return doc.Content[0]
}

// decode fills v (a pointer) from n. path is n's key path for messages.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if path != "" {
		if _, ok := d.lines[path]; !ok {
			d.lines[path] = n.Line
		}
	}
	if u, ok := v.Addr().Interface().(nodeDecoder); ok {
		u.decodeNode(d, n, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n.Line, path, "want a list (`[a, b]` or one `- item` per line), got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	default:
		d.decodeScalar(n, v, path)
	}
}

// nodeDecoder is a type that decodes itself (a choice between shapes).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, path, "want %s, got %s", want(v.Kind()), describe(n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		if n.Tag == "!!null" {
			d.errorf(n.Line, path, "want a string, got nothing (write a value or remove the key)")
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64, reflect.Int32:
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil || n.Tag != "!!int" {
			d.errorf(n.Line, path, "want a whole number, got %q", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil || (n.Tag != "!!int" && n.Tag != "!!float") {
			d.errorf(n.Line, path, "want a number, got %q", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if err != nil || n.Tag != "!!bool" {
			d.errorf(n.Line, path, "want true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	default:
		d.errorf(n.Line, path, "cannot be decoded into %s", v.Type())
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want keys (`key: value` lines, or `{key: value}`), got %s", describe(n))
		return
	}
	fields, names := keysOf(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := join(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			d.errorf(k.Line, key, "unknown key%s (valid here: %s)", didYouMean(k.Value, names), strings.Join(names, ", "))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, key, "given twice (first on line %d): keep one", first)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[key] = k.Line
		d.decode(val, v.Field(idx), key)
	}
}

// keysOf maps the yaml keys of struct type t to field indexes.
func keysOf(t reflect.Type) (map[string]int, []string) {
	m := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		m[tag] = i
		names = append(names, tag)
	}
	return m, names
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func want(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a value"
}

// describe names what a node is, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "keys (is a line under it indented by mistake?)"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// didYouMean returns ` (did you mean "x"?)` for the valid name nearest to
// got, or "" when none is close enough to be a typo. Among equally near
// names the one of got's length wins (a transposition over a deletion).
func didYouMean(got string, valid []string) string {
	best, bestD, bestL := "", len(got)/2+2, 0
	low := strings.ToLower(got)
	for _, v := range valid {
		d := distance(low, v)
		l := abs(len(v) - len(got))
		if d < bestD || (d == bestD && best != "" && l < bestL) {
			best, bestD, bestL = v, d, l
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// DidYouMean is didYouMean for the CLI's other strict parsers: a
// suggestion of the nearest of valid, or "".
func DidYouMean(got string, valid []string) string { return didYouMean(got, valid) }

// distance is the optimal string alignment distance between a and b, in
// bytes: insertions, deletions, substitutions and transpositions of
// neighbours each cost one.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
