package stages

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// parsePrompt parses an LLM stage's prompt template. A key the data
// lacks is an error, not "<no value>": a typo ({{.Out.clasify.label}})
// would otherwise be sent, and paid for, on every item.
func parsePrompt(name, source string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(source)
}

// itemText is the text an LLM stage reads for it: the sanitized text when
// the sanitize stage ran, else the record's text.
func itemText(it pipeline.Item) string {
	for _, raw := range []json.RawMessage{it.Outputs["sanitize"], it.Prev} {
		var out struct {
			Text *string `json:"text"`
		}
		if len(raw) > 0 && json.Unmarshal(raw, &out) == nil && out.Text != nil {
			return *out.Text
		}
	}
	return it.Text
}

// promptData is what the template of a stage with labels sees for it:
// each field of earlier (stage -> the fields its output can have) that
// the item's output lacks reads "".
func promptData(it pipeline.Item, labels []string, earlier map[string][]string) LLMPromptData {
	data := LLMPromptData{ID: it.ID, Text: itemText(it), Fields: it.Fields, Labels: labels, Out: map[string]map[string]any{}}
	if data.Fields == nil {
		data.Fields = map[string]string{}
	}
	for name, raw := range it.Outputs {
		var out map[string]any
		if json.Unmarshal(raw, &out) == nil {
			data.Out[name] = out
		}
	}
	for name, fields := range earlier {
		out := data.Out[name]
		if out == nil {
			out = map[string]any{}
			data.Out[name] = out
		}
		for _, f := range fields {
			if _, ok := out[f]; !ok {
				out[f] = ""
			}
		}
	}
	return data
}

// TemplateKeyError is a prompt template reading a key its data does not
// have: a field the item lacks, a stage or an output field that does not
// exist, or a misspelt .Text.
type TemplateKeyError struct {
	// Stage is the stage whose template it is.
	Stage string
	// Chain is the template's expression up to the key, as text/template
	// prints it: ".Out.clasify.label".
	Chain string
	// Key is the missing key: "clasify".
	Key string
	// Err is text/template's error.
	Err error
}

func (e *TemplateKeyError) Error() string {
	return fmt.Sprintf("%s: the prompt template reads %s: there is no %q", e.Stage, e.Chain, e.Key)
}

func (e *TemplateKeyError) Unwrap() error { return e.Err }

// Path is Chain's parts before Key: ["Out"] for .Out.clasify.label,
// [] for .Feilds.app. ok is false when Key is not in Chain as a plain
// part (a variable, a function's result).
func (e *TemplateKeyError) Path() (path []string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(e.Chain, "."), ".")
	i := slices.Index(parts, e.Key)
	if i < 0 || strings.HasPrefix(e.Chain, "$") {
		return nil, false
	}
	return parts[:i], true
}

var templateKeyRE = regexp.MustCompile(`at <([^>]*)>: (?:map has no entry for key "([^"]*)"|can't evaluate field (\w+) in type)`)

// templateKey reads a missing key out of text/template's error, nil when
// err is about something else.
func templateKey(stage string, err error) *TemplateKeyError {
	m := templateKeyRE.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	return &TemplateKeyError{Stage: stage, Chain: m[1], Key: m[2] + m[3], Err: err}
}

// CheckPrompt renders a stage's prompt template (source, "" for
// DefaultPromptTemplate) for it, as Process would, and discards the
// text: a key the item lacks is a *TemplateKeyError, any other failure
// (a template that does not parse, a function failing) an error. earlier
// is as LLMConfig.EarlierOutputs: the fields of the earlier stages'
// outputs, which read "" on an item without them, so that on a sample
// item only names are checked. It sends nothing.
func CheckPrompt(stage, source string, labels []string, it pipeline.Item, earlier map[string][]string) error {
	tmpl, err := parsePrompt(stage, orDefault(source, DefaultPromptTemplate))
	if err != nil {
		return fmt.Errorf("%s: the prompt template does not parse: %w", stage, err)
	}
	if err := tmpl.Execute(io.Discard, promptData(it, labels, earlier)); err != nil {
		if k := templateKey(stage, err); k != nil {
			return k
		}
		return fmt.Errorf("%s: the prompt template fails: %w", stage, err)
	}
	return nil
}

// PromptDataKeys are the keys a prompt template's data has at its top.
var PromptDataKeys = []string{"ID", "Text", "Fields", "Labels", "Out"}

// labelOutput is the fields of a label stage's output.
var labelOutput = []string{"label", "confidence", "reason", "model", "usage"}

// SampleOutput is an output a stage with labels (or else schema) could
// give, with every field it always has: the first label, or each
// property of the schema with a value of its type. Checks render
// templates and evaluate conditions with it, so that a misspelt field
// is found before any call.
func SampleOutput(labels []string, schema []byte) (map[string]any, error) {
	if len(labels) > 0 {
		return map[string]any{"label": labels[0], "confidence": 0.5, "reason": "", "model": "", "usage": map[string]any{}}, nil
	}
	s, err := ParseResponseSchema(schema)
	if err != nil {
		return nil, err
	}
	out, _ := sampleValue(s, 0).(map[string]any)
	return out, nil
}

// OutputFields is the sorted names of SampleOutput's fields.
func OutputFields(labels []string, schema []byte) ([]string, error) {
	if len(labels) > 0 {
		return slices.Sorted(slices.Values(labelOutput)), nil
	}
	out, err := SampleOutput(nil, schema)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for k := range out {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, nil
}

// sampleValue is a value of schema s's type; depth bounds a schema
// that nests deeper than any answer would.
func sampleValue(s *genai.Schema, depth int) any {
	if s == nil || depth > 32 {
		return nil
	}
	switch s.Type {
	case genai.TypeObject:
		m := make(map[string]any, len(s.Properties))
		for k, p := range s.Properties {
			m[k] = sampleValue(p, depth+1)
		}
		return m
	case genai.TypeArray:
		return []any{}
	case genai.TypeString:
		if len(s.Enum) > 0 {
			return s.Enum[0]
		}
		return ""
	case genai.TypeInteger:
		return 0
	case genai.TypeNumber:
		return 0.0
	case genai.TypeBoolean:
		return false
	}
	return nil
}
