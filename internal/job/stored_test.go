package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func snapshot(t *testing.T, path string) (*Job, Stored) {
	t.Helper()
	j, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := j.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return j, s
}

func TestStored_RoundTrip(t *testing.T) {
	j, s := snapshot(t, filepath.Join("testdata", "nightly.yaml"))
	back, err := UnmarshalStored(s.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	j2, err := back.Job("r.db")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(j2.Stages), len(j.Stages); got != want {
		t.Fatalf("stages = %d, want %d", got, want)
	}
	changes, err := Diff(s, back)
	if err != nil || len(changes) != 0 {
		t.Fatalf("a stored job differs from itself: %v %v", changes, err)
	}
	show := back.Show()
	for _, want := range []string{"name: extract", `when: classify.label == "bug"`, "#   bug.schema.json "} {
		if !strings.Contains(show, want) {
			t.Errorf("Show() lacks %q:\n%s", want, show)
		}
	}
	// What Show prints is a job file that decodes to the same job.
	if _, err := Decode(filepath.Join("testdata", "shown.yaml"), []byte(show)); err != nil {
		t.Errorf("Show() output does not decode: %v", err)
	}
}

func TestDiff(t *testing.T) {
	base, _ := os.ReadFile(filepath.Join("testdata", "nightly.yaml"))
	tests := []struct {
		name string
		edit func(dir, body string) string // returns the new body
		want []string                      // Change.String()s
	}{
		{"unchanged", func(_, b string) string { return b }, nil},
		{"model changed", func(_, b string) string {
			return strings.Replace(b, "model: gemini-2.5-pro", "model: gemini-2.5-flash", 1)
		}, []string{"extract.model: gemini-2.5-pro -> gemini-2.5-flash"}},
		{"label added", func(_, b string) string {
			return strings.Replace(b, "ux, other]", "ux, security, other]", 1)
		}, []string{"classify.output.label: [bug, pricing, praise, feature_request, ux, other] -> [bug, pricing, praise, feature_request, ux, security, other]"}},
		{"prompt file edited", func(dir, b string) string {
			os.WriteFile(filepath.Join(dir, "classify.tmpl"), []byte("Label: {{.Text}}\n"), 0o600)
			return b
		}, []string{"classify.prompt_file (contents of classify.tmpl): "}},
		{"stage added before aggregate", func(_, b string) string {
			return strings.Replace(b, "  - aggregate:", "  - llm: {name: summary, output: {label: [short, long]}}\n  - aggregate:", 1)
		}, []string{"stage summary: added"}},
		{"stage removed", func(_, b string) string {
			i := strings.Index(b, "  - llm:\n      name: extract")
			j := strings.Index(b, "  - aggregate:")
			return b[:i] + b[j:]
		}, []string{"stage extract: removed"}},
		{"input path only", func(_, b string) string {
			return strings.Replace(b, "path: reviews.jsonl", "path: reviews-12.jsonl", 1)
		}, []string{"input.path: reviews.jsonl -> reviews-12.jsonl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeJob(t, string(base))
			_, old := snapshot(t, p)
			if err := os.WriteFile(p, []byte(tt.edit(filepath.Dir(p), string(base))), 0o600); err != nil {
				t.Fatal(err)
			}
			_, cur := snapshot(t, p)
			changes, err := Diff(old, cur)
			if err != nil {
				t.Fatal(err)
			}
			if len(changes) != len(tt.want) {
				t.Fatalf("changes = %v, want %v", changes, tt.want)
			}
			for i, c := range changes {
				if !strings.HasPrefix(c.String(), tt.want[i]) {
					t.Errorf("change %d = %q, want %q", i, c, tt.want[i])
				}
			}
		})
	}
}

func TestStageDefs_Fingerprints(t *testing.T) {
	base, _ := os.ReadFile(filepath.Join("testdata", "nightly.yaml"))
	p := writeJob(t, string(base))
	defs := func() map[string]string {
		j, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		files, err := j.Files()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range j.StageDefs(files) {
			out[d.Name] = d.Fingerprint
		}
		return out
	}
	before := defs()
	// The limiter and the mode change how, not what: no fingerprint moves.
	body := strings.Replace(string(base), "limiter: {ceiling: 128}", "limiter: {ceiling: 64}\n      mode: batch", 1)
	os.WriteFile(p, []byte(body), 0o600)
	if after := defs(); after["classify"] != before["classify"] {
		t.Errorf("limiter/mode changed the classify fingerprint")
	}
	// An edited prompt file changes only its stage's.
	os.WriteFile(filepath.Join(filepath.Dir(p), "extract.tmpl"), []byte("{{.Text}}"), 0o600)
	after := defs()
	for name, fp := range before {
		if changed := after[name] != fp; changed != (name == "extract") {
			t.Errorf("stage %s: fingerprint changed = %v", name, changed)
		}
	}
}
