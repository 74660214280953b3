package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRunJob_NamesCheckedBeforeAnyCall: a template, count: or when:
// naming something that is not there is refused by `run -f` and `plan -f`
// (exit 2, the key named with the nearest valid name) before the
// database is created or a call is made; a when: comparing a JSON number
// with a number runs.
func TestRunJob_NamesCheckedBeforeAnyCall(t *testing.T) {
	sim := geminisim.New(geminisim.Config{Latency: geminisim.Latency{Base: time.Millisecond}})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"It crashes","app":"maps","rating":1}`+"\n"+`{"id":"b","text":"Lovely","app":"maps","rating":5}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(dir, "bug.schema.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"severity":{"type":"string"}},"required":["severity"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stagesYAML := func(prompt, when, count string) string {
		return "  - llm:\n      name: classify\n      prompt: '" + prompt + "'\n      output: {label: [bug, other]}\n" +
			"  - llm:\n      name: extract\n      when: '" + when + "'\n      output: {schema_file: " + schema + "}\n" +
			"  - aggregate: {count: " + count + "}\n"
	}
	tests := []struct {
		name, prompt, when, count string
		want                      string // "" runs
	}{
		{"template typo", "Classify {{.Feilds.app}}", "fields.rating <= 2", "extract.severity", `stages[0].llm.prompt: the template reads {{.Feilds.app}}: there is no "Feilds" (did you mean "Fields"?)`},
		{"count typo", "{{.Text}}", "fields.rating <= 2", "extract.severty", `stages[2].aggregate.count: "extract.severty": stage extract's output has no field "severty" (did you mean "severity"?)`},
		{"when field typo", "{{.Text}}", "fields.ratin <= 2", "extract.severity", `stages[1].llm.when: "fields.ratin <= 2" reads fields.ratin: no input record has a field "ratin" (did you mean "rating"?)`},
		{"a number compared with text", "{{.Text}}", `fields.rating == "1"`, "extract.severity", `stages[1].llm.when: "fields.rating == \"1\"" compares fields.rating with the text "1", but the input gives rating as a number`},
		{"numbers compare", "{{.Fields.app}}: {{.Text}}", "fields.rating <= 2", "extract.severity", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := t.TempDir()
			jobFile := filepath.Join(sub, "job.yaml")
			body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" + stagesYAML(tt.prompt, tt.when, tt.count)
			if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			before := sim.Stats().Calls
			for _, cmd := range []string{"plan", "run"} {
				args := []string{"sawtooth", cmd, "-f", jobFile}
				if cmd == "run" {
					args = append(args, "--quiet")
				}
				err := runApp(args, io.Discard, io.Discard)
				var ue *UsageError
				if tt.want == "" {
					if err != nil {
						t.Fatalf("%s: %v", cmd, err)
					}
					continue
				}
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("%s: %v\nwant a usage error containing %q", cmd, err, tt.want)
				}
				if _, err := os.Stat(filepath.Join(sub, "job.db")); err == nil {
					t.Fatalf("%s created the database", cmd)
				}
			}
			calls := sim.Stats().Calls - before
			if tt.want != "" && calls != 0 {
				t.Errorf("%d calls made, want none", calls)
			}
			if tt.want == "" && calls != 3 { // two classify, one extract (rating 1)
				t.Errorf("%d calls made, want 3", calls)
			}
		})
	}
}

// TestRunJob_FieldTypedSinceStored: a database holds items whose rating
// is text (as every field of items ingested before sawtooth kept input
// types; here a JSON string); an input giving rating as a JSON number
// would make `fields.rating == 4` compare text in the old items and
// numbers in the new. `plan -f` and `run -f` refuse it (exit 2, naming
// the key and a conversion) before ingesting or calling anything.
func TestRunJob_FieldTypedSinceStored(t *testing.T) {
	sim := geminisim.New(geminisim.Config{Latency: geminisim.Latency{Base: time.Millisecond}})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	dir := t.TempDir()
	input, jobFile := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: in.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: classify\n      output: {label: [bug, other]}\n" +
		"  - llm:\n      name: followup\n      when: 'fields.rating == 4'\n      output: {label: [yes, no]}\n"
	if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"It crashes","rating":"4"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if err := os.WriteFile(input, []byte(`{"id":"b","text":"Lovely","rating":4}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "job.db")
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	calls := sim.Stats().Calls
	want := `stages[1].llm.when: "fields.rating == 4" compares fields.rating, but the database holds items ingested before sawtooth kept input types, in which rating is text ("4" in item a), while the input gives it as a number ("4" in item b)`
	for _, cmd := range []string{"plan", "run"} {
		args := []string{"sawtooth", cmd, "-f", jobFile}
		if cmd == "run" {
			args = append(args, "--quiet")
		}
		err := runApp(args, io.Discard, io.Discard)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "write float(fields.rating)") {
			t.Fatalf("%s: %v\nwant a usage error containing %q", cmd, err, want)
		}
	}
	if after, err := os.ReadFile(db); err != nil || string(after) != string(before) {
		t.Errorf("the refused commands changed the database (%v)", err)
	}
	if n := sim.Stats().Calls - calls; n != 0 {
		t.Errorf("%d calls made, want none", n)
	}
}

// TestRunJob_BaseURLOverrides: --base-url, and GOOGLE_GEMINI_BASE_URL
// alike, are taken with -f in place of the job's base_url.
func TestRunJob_BaseURLOverrides(t *testing.T) {
	sim := geminisim.New(geminisim.Config{Latency: geminisim.Latency{Base: time.Millisecond}})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"It crashes"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		flag bool
	}{{"flag", true}, {"environment", false}} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			jobFile := filepath.Join(sub, "job.yaml")
			// The job's own base_url is a server that is not there.
			body := "db: job.db\ninput: {path: " + input + "}\nbase_url: http://127.0.0.1:1\nstages:\n  - llm:\n      name: classify\n      max_attempts: 1\n      output: {label: [bug, other]}\n"
			if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"sawtooth", "run", "-f", jobFile, "--quiet"}
			if tc.flag {
				args = append(args, "--base-url", url)
			} else {
				t.Setenv("GOOGLE_GEMINI_BASE_URL", url)
			}
			before := sim.Stats().Calls
			if err := runApp(args, io.Discard, io.Discard); err != nil {
				t.Fatalf("run: %v", err)
			}
			if got := sim.Stats().Calls - before; got != 1 {
				t.Errorf("calls to --base-url's server = %d, want 1", got)
			}
		})
	}
}
