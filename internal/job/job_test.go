package job

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the
// genai SDK's opencensus worker, started at init, is not a leak).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestLoad_Nightly(t *testing.T) {
	j, err := Load(filepath.Join("testdata", "nightly.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if j.DB != "reviews.db" || j.Input.ID != "review_id" || j.Input.Text != "body" {
		t.Errorf("header = %+v", j)
	}
	var names []string
	for _, s := range j.Stages {
		names = append(names, s.Kind()+":"+s.Name())
	}
	if got, want := strings.Join(names, ","), "sanitize:sanitize,llm:classify,llm:extract,aggregate:aggregate"; got != want {
		t.Errorf("stages = %s, want %s", got, want)
	}
	ex := j.Stages[2].LLM
	if ex.When != `classify.label == "bug"` || ex.Output.SchemaFile != "bug.schema.json" || ex.Model != "gemini-2.5-pro" {
		t.Errorf("extract = %+v", ex)
	}
	if j.Stages[1].LLM.Limiter.Ceiling != 128 {
		t.Errorf("classify limiter = %+v", j.Stages[1].LLM.Limiter)
	}
}

// writeJob writes body as job.yaml beside copies of the testdata files
// and returns its path.
func writeJob(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"classify.tmpl", "extract.tmpl", "bug.schema.json", "ref.schema.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const head = "db: r.db\ninput: {path: in.jsonl}\nstages:\n"

func TestDecode_Errors(t *testing.T) {
	tests := []struct {
		name string
		body string
		line int
		key  string
		msg  string // a part of the message
	}{
		{"unknown top key", "db: r.db\ninptu: {path: x}\nstages: []\n", 2, "inptu", `did you mean "input"`},
		{"unknown nested key", head + "  - llm:\n      name: c\n      modle: x\n      output: {label: [a]}\n", 6, "stages[0].llm.modle", `did you mean "model"`},
		{"wrong type int", head + "  - llm:\n      name: c\n      output: {label: [a]}\n      limiter: {ceiling: lots}\n", 7, "stages[0].llm.limiter.ceiling", `want a whole number, got "lots"`},
		{"wrong type list", head + "  - llm:\n      name: c\n      output: {label: bug}\n", 6, "stages[0].llm.output.label", "want a list"},
		{"wrong type mapping", "db: r.db\ninput: reviews.jsonl\nstages: []\n", 2, "input", "want keys"},
		{"key twice", head + "  - llm:\n      name: c\n      name: d\n      output: {label: [a]}\n", 6, "stages[0].llm.name", "given twice (first on line 5)"},
		{"unknown stage kind", head + "  - classify: {}\n", 4, "stages[0].classify", `unknown stage kind`},
		{"two kinds in one entry", head + "  - sanitize: {}\n    llm: {name: c}\n", 4, "stages[0]", "want one stage"},
		{"bad value backend", "db: r.db\nbackend: vertx\nstages:\n  - llm: {name: c, output: {label: [a]}}\n", 2, "backend", `did you mean "vertex"`},
		{"bad value mode", head + "  - llm:\n      name: c\n      output: {label: [a]}\n      mode: batched\n", 7, "stages[0].llm.mode", "write online, batch or auto"},
		{"bad stage name", head + "  - llm:\n      name: Classify Reviews\n      output: {label: [a]}\n", 5, "stages[0].llm.name", "lowercase"},
		{"duplicate stage name", head + "  - llm: {name: c, output: {label: [a]}}\n  - llm: {name: c, output: {label: [a]}}\n", 5, "stages[1].llm", "already used"},
		{"missing output", head + "  - llm:\n      name: c\n", 4, "stages[0].llm.output", "missing"},
		{"missing prompt file", head + "  - llm:\n      name: c\n      prompt_file: nope.tmpl\n      output: {label: [a]}\n", 6, "stages[0].llm.prompt_file", "not found"},
		{"schema refused", head + "  - llm:\n      name: c\n      output: {schema_file: ref.schema.json}\n", 6, "stages[0].llm.output.schema_file", `cannot express "$ref"`},
		{"when unknown stage", head + "  - llm:\n      name: c\n      when: 'clasify.label == \"bug\"'\n      output: {label: [a]}\n", 6, "stages[0].llm.when", "unknown name clasify"},
		{"when not boolean", head + "  - llm: {name: a, output: {label: [x]}}\n  - llm:\n      name: c\n      when: '1 + 2'\n      output: {label: [a]}\n", 7, "stages[1].llm.when", "bool"},
		{"sanitize not first", head + "  - llm: {name: c, output: {label: [a]}}\n  - sanitize: {}\n", 5, "stages[1].sanitize", "first stage"},
		{"aggregate count unknown", head + "  - llm: {name: c, output: {label: [a]}}\n  - aggregate: {count: extract.severity}\n", 5, "stages[1].aggregate.count", `no earlier stage named "extract"`},
		{"aggregate count field unknown", head + "  - llm: {name: extract, output: {schema_file: bug.schema.json}}\n  - aggregate: {count: extract.severty}\n", 5, "stages[1].aggregate.count", `output has no field "severty" (did you mean "severity"?)`},
		{"when output field unknown", head + "  - llm: {name: classify, output: {label: [a]}}\n  - llm:\n      name: c\n      when: 'classify.lable == \"a\"'\n      output: {label: [a]}\n", 7, "stages[1].llm.when", `no field "lable" (did you mean "label"?)`},
		{"syntax", "db: r.db\nstages:\n\t- llm: {}\n", 3, "", "not valid YAML"},
		{"empty", "# nothing\n", 0, "", "empty"},
		{"no db", "stages:\n  - llm: {name: c, output: {label: [a]}}\n", 1, "db", "missing"},
		{"negative ceiling", head + "  - llm:\n      name: c\n      output: {label: [a]}\n      limiter: {ceiling: -2}\n", 7, "stages[0].llm.limiter.ceiling", "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeJob(t, tt.body)
			_, err := Load(p)
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("err = %v, want Errors", err)
			}
			e := es[0]
			if e.Line != tt.line || e.Key != tt.key || !strings.Contains(e.Msg, tt.msg) || e.File != p {
				t.Errorf("got %s:%d key %q: %s\nwant line %d key %q containing %q", e.File, e.Line, e.Key, e.Msg, tt.line, tt.key, tt.msg)
			}
			if !strings.HasPrefix(err.Error(), p) {
				t.Errorf("message %q does not start with the file", err)
			}
		})
	}
}

func TestDecode_AllProblemsReported(t *testing.T) {
	p := writeJob(t, "db: r.db\nfoo: 1\nstages:\n  - llm:\n      name: c\n      bar: 2\n      output: {label: [a]}\n")
	_, err := Load(p)
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 || es[0].Line != 2 || es[1].Line != 6 {
		t.Fatalf("err = %v, want two problems on lines 2 and 6", err)
	}
}

// TestDecode_KeysAndValuesInOneRound: unknown keys and bad values are
// reported together, not the values only once the keys are fixed; a
// value problem that only repeats a key's (a name missing because its
// key is misspelt) is left out.
func TestDecode_KeysAndValuesInOneRound(t *testing.T) {
	p := writeJob(t, "db: r.db\ninput: {path: in.jsonl, txt: body}\nstages:\n"+
		"  - llm:\n      nmae: c\n      output: {label: [a]}\n"+
		"  - llm:\n      name: d\n      when: 'fields.rating <= '\n      mode: weird\n      output: {label: [a]}\n")
	_, err := Load(p)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want Errors", err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Key)
	}
	want := []string{"input.txt", "stages[0].llm.nmae", "stages[1].llm.when", "stages[1].llm.mode"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("problems at %v, want %v:\n%v", got, want, err)
	}
}

func TestDecodeFlat(t *testing.T) {
	valid := []string{"model", "labels", "workers"}
	tests := []struct {
		name string
		body string
		want string // "" means no error; else a part of it
		line int
	}{
		{"ok", "model: m\nlabels: [a, b]\n", "", 0},
		{"unknown", "model: m\nworkrs: 3\n", `did you mean "workers"`, 2},
		{"nested", "model:\n  name: x\n", "not nested keys", 1},
		{"indented continuation", "model: m\n  workers: 3\n", "", 0}, // YAML folds it: refused below
		{"twice", "model: m\nmodel: n\n", "given twice", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := DecodeFlat("c.yaml", []byte(tt.body), valid)
			if tt.name == "indented continuation" {
				// "model: m\n  workers: 3" is a YAML error or a folded
				// value; either way it must not decode as model "m".
				if err == nil && len(es) == 1 && es[0].Values[0] == "m" {
					t.Fatalf("indented line silently ignored: %+v", es)
				}
				return
			}
			if tt.want == "" {
				if err != nil || len(es) != 2 || strings.Join(es[1].Values, ",") != "a,b" {
					t.Fatalf("got %+v, %v", es, err)
				}
				return
			}
			var jes Errors
			if !errors.As(err, &jes) || jes[0].Line != tt.line || !strings.Contains(jes[0].Msg, tt.want) {
				t.Fatalf("err = %v, want line %d containing %q", err, tt.line, tt.want)
			}
		})
	}
}
