package stages

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestLLM_PromptKeyTypos: a template reading a key the item does not
// have fails the item, permanently and before any call, instead of
// sending "<no value>"; a field of an earlier stage's output that the
// item lacks (the stage skipped it) reads "".
func TestLLM_PromptKeyTypos(t *testing.T) {
	earlier := map[string][]string{"classify": {"label"}, "extract": {"severity"}}
	item := pipeline.Item{
		Record:  pipeline.Record{ID: "1", Text: "it crashes", Fields: map[string]string{"app": "maps"}},
		Outputs: map[string]json.RawMessage{"classify": json.RawMessage(`{"label":"bug"}`), "extract": json.RawMessage(`{"skipped":true}`)},
	}
	tests := []struct {
		name, tmpl string
		wantErr    string // "" for a call made
	}{
		{"a misspelt stage", "Extract from {{.Out.clasify.label}}", `map has no entry for key "clasify"`},
		{"a misspelt data key", "{{.Feilds.app}}", "can't evaluate field Feilds"},
		{"a field the item lacks", "{{.Fields.store}}: {{.Text}}", `the item has no "store"`},
		{"a misspelt output field", "{{.Out.classify.lable}}", `map has no entry for key "lable"`},
		{"a skipped stage's field reads empty", "{{.Text}} [{{.Out.extract.severity}}] {{.Fields.app}}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, url, _ := simServer(t, geminisim.Config{})
			l := newTestLLM(t, LLMConfig{Name: "summary", Labels: []string{"a", "b"}, PromptTemplate: tt.tmpl, EarlierOutputs: earlier,
				Endpoint: Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}})
			_, err := l.Process(context.Background(), item)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Process: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent):
				t.Fatalf("Process: %v, want permanent %q", err, tt.wantErr)
			}
			want := int64(0)
			if tt.wantErr == "" {
				want = 1
			}
			if got := sim.Stats().Calls; got != want {
				t.Errorf("calls = %d, want %d", got, want)
			}
			if tt.wantErr == "" {
				p, _ := l.render(item)
				if p != "it crashes [] maps" {
					t.Errorf("prompt %q, want %q", p, "it crashes [] maps")
				}
			}
		})
	}
}

func TestCheckPrompt(t *testing.T) {
	it := pipeline.Item{Record: pipeline.Record{ID: "1", Text: "x", Fields: map[string]string{"app": "maps"}}}
	earlier := map[string][]string{"classify": {"confidence", "label"}}
	tests := []struct {
		tmpl      string
		chain     string
		key       string
		path      []string
		otherFail string
	}{
		{tmpl: "{{.Out.classify.label}} {{.Fields.app}} {{.ID}}"},
		{tmpl: "Extract from {{.Out.clasify.label}}", chain: ".Out.clasify.label", key: "clasify", path: []string{"Out"}},
		{tmpl: "{{.Out.classify.lable}}", chain: ".Out.classify.lable", key: "lable", path: []string{"Out", "classify"}},
		{tmpl: "{{.Feilds.app}}", chain: ".Feilds.app", key: "Feilds", path: []string{}},
		{tmpl: "{{.Fields.ap}}", chain: ".Fields.ap", key: "ap", path: []string{"Fields"}},
		{tmpl: "{{.Text", otherFail: "does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			err := CheckPrompt("extract", tt.tmpl, nil, it, earlier)
			var k *TemplateKeyError
			switch {
			case tt.otherFail != "":
				if err == nil || errors.As(err, &k) || !strings.Contains(err.Error(), tt.otherFail) {
					t.Fatalf("err = %v, want %q", err, tt.otherFail)
				}
				return
			case tt.key == "":
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.As(err, &k) {
				t.Fatalf("err = %v, want a *TemplateKeyError", err)
			}
			path, ok := k.Path()
			if k.Stage != "extract" || k.Chain != tt.chain || k.Key != tt.key || !ok || !reflect.DeepEqual(path, tt.path) {
				t.Errorf("got stage %q chain %q key %q path %q (%v), want %q %q %q", k.Stage, k.Chain, k.Key, path, ok, tt.chain, tt.key, tt.path)
			}
		})
	}
}

func TestOutputFields(t *testing.T) {
	got, err := OutputFields(nil, []byte(bugSchema))
	if want := []string{"component", "severity", "steps"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("schema: %v, %v; want %v", got, err, want)
	}
	got, _ = OutputFields([]string{"bug"}, nil)
	if want := []string{"confidence", "label", "model", "reason", "usage"}; !reflect.DeepEqual(got, want) {
		t.Errorf("labels: %v, want %v", got, want)
	}
	out, _ := SampleOutput(nil, []byte(bugSchema))
	if out["severity"] != "low" || out["component"] != "" {
		t.Errorf("SampleOutput = %v, want the first enum value and empty strings", out)
	}
}
