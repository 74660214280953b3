package job

import (
	"errors"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestJob_CheckSample: a name a template or a condition reads that the
// data does not have, and a condition that fails on the sample, are
// found on one item before anything is sent, naming the key, its line
// and the nearest valid name.
func TestJob_CheckSample(t *testing.T) {
	sample := pipeline.Record{ID: "r1", Text: "it crashes", Fields: map[string]string{"app": "maps", "rating": "2", "stars": "2"},
		Types: map[string]pipeline.FieldType{"rating": pipeline.FieldNumber}}
	fields := []string{"app", "rating", "stars", "store"} // store: some other record has it
	classify := "  - llm: {name: classify, output: {label: [bug, other]}}\n"
	tests := []struct {
		name string
		body string
		line int
		key  string
		msg  string // "" for no problem
	}{
		{"all names there", classify + "  - llm:\n      name: extract\n      prompt: '{{.Out.classify.label}} {{.Fields.store}} {{.Text}}'\n      when: 'fields.rating <= 2 && classify.label == \"bug\"'\n      output: {schema_file: bug.schema.json}\n", 0, "", ""},
		{"a misspelt stage", classify + "  - llm:\n      name: extract\n      prompt: 'Extract from {{.Out.clasify.label}}'\n      output: {schema_file: bug.schema.json}\n", 7, "stages[1].llm.prompt", `there is no "clasify" (did you mean "classify"?)`},
		{"a misspelt data key", "  - llm:\n      name: c\n      prompt: '{{.Feilds.app}}'\n      output: {label: [a]}\n", 6, "stages[0].llm.prompt", `there is no "Feilds" (did you mean "Fields"?)`},
		{"a field no record has", "  - llm:\n      name: c\n      prompt: '{{.Fields.ap}}'\n      output: {label: [a]}\n", 6, "stages[0].llm.prompt", `there is no "ap" (did you mean "app"?)`},
		{"an output field", classify + "  - llm:\n      name: c\n      prompt: '{{.Out.classify.reson}}'\n      output: {label: [a]}\n", 7, "stages[1].llm.prompt", `(did you mean "reason"?)`},
		{"a template file", "  - llm:\n      name: c\n      prompt_file: classify.tmpl\n      output: {label: [a]}\n", 0, "", ""},
		{"a when field no record has", "  - llm:\n      name: c\n      when: 'fields.ratng <= 2'\n      output: {label: [a]}\n", 6, "stages[0].llm.when", `(did you mean "rating"?)`},
		{"a text field compared with a number", "  - llm:\n      name: c\n      when: 'fields.stars <= 2'\n      output: {label: [a]}\n", 6, "stages[0].llm.when", "string <= int (at column 14)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Load(writeJob(t, head+tt.body))
			if err != nil {
				t.Fatal(err)
			}
			err = j.CheckSample(sample, fields)
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("CheckSample: %v", err)
				}
				return
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("err = %v, want one problem", err)
			}
			if e := es[0]; e.Line != tt.line || e.Key != tt.key || !strings.Contains(e.Msg, tt.msg) || strings.Contains(e.Msg, "\n") {
				t.Errorf("got line %d key %q: %s\nwant line %d key %q containing %q", e.Line, e.Key, e.Msg, tt.line, tt.key, tt.msg)
			}
		})
	}
}
