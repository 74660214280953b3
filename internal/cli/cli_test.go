package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

func TestNearest(t *testing.T) {
	names := []string{"rating-field", "date-field", "group-by", "json", "status"}
	tests := []struct{ in, want string }{
		{"rating-feild", "rating-field"},
		{"rating_field", "rating-field"},
		{"jsn", "json"},
		{"stauts", "status"},
		{"completely-different", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := nearest(tt.in, names); got != tt.want {
				t.Errorf("nearest(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// testCommand is a command with the pipeline flags whose Action records
// the parsed options, to test --config without running anything.
func testCommand(got *pipelineOptions) *cli.App {
	var o pipelineOptions
	cmd := &cli.Command{
		Name:   "run",
		Flags:  append(append([]cli.Flag{dbFlag()}, pipelineFlags(&o)...), rerunFlags(&o, true)...),
		Before: before("db"),
		Action: func(c *cli.Context) error {
			o.fromContext(c)
			*got = o
			return nil
		},
	}
	catchUsageErrors(cmd)
	return &cli.App{Name: "sawtooth", Commands: []*cli.Command{cmd}, Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{},
		ExitErrHandler: func(*cli.Context, error) {}}
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		args    []string
		wantErr []string
		check   func(t *testing.T, o pipelineOptions)
	}{
		{name: "every kind of flag", yaml: "db: x.db\nmodel: m1\nworkers: 3\ntimeout: 5s\ndecrease: 0.25\nquiet: true\nlabels: a,b\ngroup-by:\n  - app\n  - country\n",
			check: func(t *testing.T, o pipelineOptions) {
				if o.DB != "x.db" || o.Model != "m1" || o.Workers != 3 || o.Timeout.String() != "5s" || o.Decrease != 0.25 || !o.Quiet {
					t.Errorf("options = %+v", o)
				}
				if !slices.Equal(o.Labels, []string{"a", "b"}) || !slices.Equal(o.GroupBy, []string{"app", "country"}) {
					t.Errorf("labels %v, group-by %v", o.Labels, o.GroupBy)
				}
			}},
		{name: "command line wins", yaml: "db: x.db\nmodel: m1\n", args: []string{"--model", "m2"},
			check: func(t *testing.T, o pipelineOptions) {
				if o.Model != "m2" {
					t.Errorf("model = %q, want the command line's m2", o.Model)
				}
			}},
		{name: "comments and blank lines", yaml: "# nightly job\ndb: x.db\n\n# the labels\nlabels: [a, b]\n",
			check: func(t *testing.T, o pipelineOptions) {
				if !slices.Equal(o.Labels, []string{"a", "b"}) {
					t.Errorf("labels = %v", o.Labels)
				}
			}},
		{name: "unknown key", yaml: "db: x.db\nrating-feild: stars\n", wantErr: []string{"line 2", `unknown key "rating-feild"`, `did you mean "rating-field"?`}},
		{name: "folded line", yaml: "db: x.db\nmodel: m1\n  m2\n", wantErr: []string{`line 3 is indented under "model"`}},
		{name: "nested mapping", yaml: "db: x.db\nmodel:\n  name: m1\n", wantErr: []string{"model takes a value, not nested keys"}},
		{name: "list for a single value", yaml: "db: x.db\nmodel: [a, b]\n", wantErr: []string{"model takes one value"}},
		{name: "bad value", yaml: "db: x.db\nworkers: many\n", wantErr: []string{"line 2", "workers"}},
		{name: "not a mapping", yaml: "- db\n", wantErr: []string{"one `flag: value` line per flag"}},
		{name: "config names a config", yaml: "config: other.yaml\n", wantErr: []string{"cannot name another"}},
		{name: "no db anywhere", yaml: "model: m1\n", wantErr: []string{"missing --db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "job.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var got pipelineOptions
			err := testCommand(&got).Run(append([]string{"sawtooth", "run", "--config", path}, tt.args...))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				tt.check(t, got)
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want a usage error", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfig_MissingFile(t *testing.T) {
	var got pipelineOptions
	err := testCommand(&got).Run([]string{"sawtooth", "run", "--config", "nosuch.yaml"})
	if err == nil || err.Error() != "config file nosuch.yaml: no such file" {
		t.Errorf("err = %v", err)
	}
}

func TestSettingsDiff(t *testing.T) {
	enc := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	tests := []struct {
		name, stage string
		old, cur    any
		want        []string
	}{
		{"aggregate rating field", "aggregate",
			stages.Aggregate{GroupBy: []string{"app"}, RatingField: ""}, stages.Aggregate{GroupBy: []string{"app"}, RatingField: "stars"},
			[]string{`rating-field: "" -> "stars"`}},
		{"classify prompt and labels", "classify",
			classifySettings{Model: "m", Labels: []string{"a", "b"}, MaxOutputTokens: 256},
			classifySettings{Model: "m", Labels: []string{"a"}, PromptFile: "v2.tmpl", Prompt: "x {{.Text}}", MaxOutputTokens: 256},
			[]string{`labels: "a,b" -> "a"`, "prompt: built-in -> sha "}},
		{"unchanged", "sanitize", sanitizeSettings{MaxChars: 10, Emoji: "keep"}, sanitizeSettings{MaxChars: 10, Emoji: "keep"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := settingsDiff(tt.stage, enc(tt.old), enc(tt.cur))
			if len(got) != len(tt.want) {
				t.Fatalf("diff = %q, want %d lines like %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("line %d = %q, want it to start %q", i, got[i], w)
				}
			}
			if tt.stage == "classify" && !strings.Contains(got[1], "(file v2.tmpl)") {
				t.Errorf("prompt line %q does not name the file", got[1])
			}
		})
	}
	if d := settingsDiff("classify", nil, enc(classifySettings{Model: "m"})); d != nil {
		t.Errorf("diff against unrecorded settings = %q, want none", d)
	}
}

func TestKeepStored(t *testing.T) {
	enc := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	stored := map[string]json.RawMessage{
		"classify":  enc(classifySettings{Model: "m-old", Labels: []string{"bug", "praise"}, PromptFile: "v1.tmpl", Prompt: "P {{.Text}}", MaxOutputTokens: 256}),
		"aggregate": enc(stages.Aggregate{GroupBy: []string{"app"}, DateField: "when", RatingField: "stars"}),
	}
	o := pipelineOptions{Model: "default", Labels: stages.DefaultLabels, MaxOutputTokens: 256, DateField: "date", RatingField: "rating",
		set: map[string]bool{"model": true}}
	kept := o.keepStored(stored)
	if o.Model != "default" {
		t.Errorf("model = %q: a given flag must win", o.Model)
	}
	if !slices.Equal(o.Labels, []string{"bug", "praise"}) || o.prompt != "P {{.Text}}" || !o.promptKept || o.RatingField != "stars" || o.DateField != "when" {
		t.Errorf("options after keepStored = %+v", o)
	}
	if want := []string{"labels", "prompt-file", "group-by", "date-field", "rating-field"}; !slices.Equal(kept, want) {
		t.Errorf("kept = %v, want %v", kept, want)
	}
}

func TestCheckDBPath(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "reviews.db")
	// A bbolt meta page: the magic number after the 16-byte page header.
	page := make([]byte, 4096)
	copy(page[16:], []byte{0xED, 0xDA, 0x0C, 0xED})
	os.WriteFile(db, page, 0o600)
	csvFile := filepath.Join(dir, "reviews.csv")
	os.WriteFile(csvFile, []byte("id,text\n1,a\n"), 0o600)
	other := filepath.Join(dir, "notes.bin")
	os.WriteFile(other, bytes.Repeat([]byte("x"), 9000), 0o600)
	tests := []struct {
		name      string
		path      string
		mustExist bool
		usage     bool
		want      string
	}{
		{"a database", db, true, false, ""},
		{"new file may be created", filepath.Join(dir, "new.db"), false, false, ""},
		{"missing, nearest suggested", filepath.Join(dir, "review.db"), true, true, "did you mean " + db},
		{"missing directory", filepath.Join(dir, "nodir", "x.db"), false, true, "does not exist"},
		{"a directory", dir, true, false, "is a directory"},
		{"an input file", csvFile, true, true, "--input " + csvFile},
		{"no database header", other, true, false, "not a database file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDBPath(tt.path, tt.mustExist)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			var ue *UsageError
			if errors.As(err, &ue) != tt.usage {
				t.Errorf("usage error = %v, want %v (%v)", !tt.usage, tt.usage, err)
			}
			if strings.Contains(err.Error(), "corrupt") && tt.path != other {
				t.Errorf("%q called corrupt", err)
			}
		})
	}
}

func TestVersionOf(t *testing.T) {
	tests := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "61d2271c0ffee0123456789"}, {Key: "vcs.time", Value: "2026-12-01T04:15:40Z"}}},
			"v1.2.0, commit 61d2271c0ffe (2026-12-01T04:15:40Z)"},
		{"local changes", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}},
			"devel, commit abc with local changes"},
		{"no VCS", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel, commit unknown (built without VCS information)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionOf(&tt.info); got != tt.want {
				t.Errorf("versionOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWarnUnknownEnv(t *testing.T) {
	var buf bytes.Buffer
	cmds := []*cli.Command{{Name: "run", Flags: []cli.Flag{dbFlag(), &cli.StringFlag{Name: "model", EnvVars: envOf("model")}}}}
	warnUnknownEnv(&buf, []string{"SAWTOOTH_MODLE=x", "SAWTOOTH_DB=a.db", "HOME=/root", "SAWTOOTH_LONG=1"}, cmds)
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "SAWTOOTH_MODLE names no flag") || !strings.Contains(got, "SAWTOOTH_MODEL") {
		t.Errorf("warnings = %q", got)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"a.db": "a.db", "/tmp/x y.db": "'/tmp/x y.db'", "it's.db": `'it'\''s.db'`, "": "''"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

// --ceiling left out is 0, each limiter's own default (512 calls in
// flight; 64 per worker of a PostgreSQL fleet); a ceiling given must be
// at least --floor, and a negative one is refused naming the flag.
func TestValidate_ceiling(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // a part of the usage error; "" for none
	}{
		{"left to the limiter", nil, ""},
		{"given", []string{"--ceiling", "16"}, ""},
		{"at the floor", []string{"--floor", "4", "--ceiling", "4"}, ""},
		{"below the floor", []string{"--floor", "4", "--ceiling", "2"}, "--ceiling: want at least --floor (4), or 0 for the default"},
		{"negative", []string{"--ceiling", "-1"}, "--ceiling: want at least --floor (1), or 0 for the default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o pipelineOptions
			if err := testCommand(&o).Run(append([]string{"sawtooth", "run", "--db", "x.db"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			if tt.args == nil && o.Ceiling != 0 {
				t.Errorf("--ceiling left out = %d, want 0", o.Ceiling)
			}
			err := o.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tt.want)
			}
		})
	}
}

// On PostgreSQL an API stage's limiter left without a ceiling gets a
// fleet worker's, its own quota or not: its pool claims and leases items.
// On flex, whose calls take minutes, it gets room for thousands in flight,
// on PostgreSQL too.
func TestLimiterCeiling(t *testing.T) {
	var bolt *store.DB
	tests := []struct {
		name  string
		given int
		db    pipeline.Database
		tier  string
		want  int
	}{
		{"bbolt, left out: the limiter's default", 0, bolt, "", 0},
		{"bbolt, given", 100, bolt, "", 100},
		{"PostgreSQL, left out: a fleet worker's", 0, (*postgres.DB)(nil), "", postgres.DefaultFleetCeiling},
		{"PostgreSQL, given", 100, (*postgres.DB)(nil), "", 100},
		{"flex, left out: thousands", 0, bolt, stages.TierFlex, stages.FlexCeiling},
		{"auto, left out: thousands", 0, bolt, stages.TierAuto, stages.FlexCeiling},
		{"priority, left out: the limiter's default", 0, bolt, stages.TierPriority, 0},
		{"flex, given", 100, bolt, stages.TierFlex, 100},
		{"flex on PostgreSQL, left out: thousands, not a fleet worker's", 0, (*postgres.DB)(nil), stages.TierFlex, stages.FlexCeiling},
		{"auto on PostgreSQL, left out: thousands", 0, (*postgres.DB)(nil), stages.TierAuto, stages.FlexCeiling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := limiterCeiling(tt.given, tt.db, tt.tier); got != tt.want {
				t.Errorf("limiterCeiling(%d) = %d, want %d", tt.given, got, tt.want)
			}
		})
	}
}
