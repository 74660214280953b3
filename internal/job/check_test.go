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
			if e := es[0]; e.Line != tt.line || e.Key != tt.key || !strings.Contains(e.Msg, tt.msg) || strings.Contains(e.Msg, "\n") ||
				strings.Count(e.Msg, "fix the condition") > 1 {
				t.Errorf("got line %d key %q: %s\nwant line %d key %q containing %q", e.Line, e.Key, e.Msg, tt.line, tt.key, tt.msg)
			}
		})
	}
}

// TestJob_CheckSample_FieldTypes: a when: that compares a typed input
// field (a JSON number or bool) with a text literal is refused on the
// sample, as is one that compares a field the input now types while the
// database holds items stored with it as text; a conversion that reads
// both alike passes.
func TestJob_CheckSample_FieldTypes(t *testing.T) {
	sample := pipeline.Record{ID: "new1", Text: "t", Fields: map[string]string{"app": "maps", "rating": "1", "paid": "true"},
		Types: map[string]pipeline.FieldType{"rating": pipeline.FieldNumber, "paid": pipeline.FieldBool}}
	old := pipeline.Record{ID: "old1", Text: "t", Fields: map[string]string{"app": "maps", "rating": "4", "paid": "false"}}
	typedOld := old
	typedOld.Types = map[string]pipeline.FieldType{"rating": pipeline.FieldNumber, "paid": pipeline.FieldBool}
	fields := []string{"app", "paid", "rating"}
	tests := []struct {
		name   string
		when   string
		stored *pipeline.Record
		msg    string // "" for no problem
	}{
		{"a number compared with text", `fields.rating == "1"`, nil, `compares fields.rating with the text "1", but the input gives rating as a number ("1" in item new1)`},
		{"text on the left, with a number's hint", `"1" != fields.rating`, nil, `compare with a number (fields.rating != 1)`},
		{"a bool compared with text", `fields.paid == "yes"`, nil, `compare with a bool (fields.paid == true)`},
		{"a number compared with a number", `fields.rating <= 2`, nil, ""},
		{"a conversion to text", `string(fields.rating) == "1"`, nil, ""},
		{"a text field compared with text", `fields.app == "maps"`, nil, ""},
		{"old items hold the number as text", `fields.rating <= 2`, &old, `the database holds items ingested before sawtooth kept input types, in which rating is text ("4" in item old1), while the input gives it as a number ("1" in item new1)`},
		{"old items hold the bool as text, compared", `fields.paid == true`, &old, `write string(fields.paid) == "true"`},
		{"a conversion reads old and new alike", `float(fields.rating) <= 2`, &old, ""},
		{"stored items typed too", `fields.rating <= 2`, &typedOld, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Load(writeJob(t, head+"  - llm:\n      name: c\n      when: '"+tt.when+"'\n      output: {label: [a]}\n"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.stored == nil {
				err = j.CheckSample(sample, fields)
			} else {
				err = j.CheckSampleStored(sample, fields, *tt.stored)
			}
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("err = %v, want one problem", err)
			}
			if e := es[0]; e.Line != 6 || e.Key != "stages[0].llm.when" || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("got line %d key %q: %s\nwant line 6 key stages[0].llm.when containing %q", e.Line, e.Key, e.Msg, tt.msg)
			}
		})
	}
}
