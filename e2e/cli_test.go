package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCLI_Contract runs the built binary on the mistakes a new user
// makes and checks what the README promises: the exit code, a message
// that names the problem and the way on, and no file created by a command
// that fails on its arguments.
func TestCLI_Contract(t *testing.T) {
	t.Parallel()
	_, url := startSim(t, faultSim(61))
	env := simEnv(url)
	dir := t.TempDir()
	input := writeItems(t, dir, 40, 61)
	db := filepath.Join(dir, "reviews.db")
	if code, _, errs := sawtooth(t, env, "run", "--db", db, "--input", input, "--quiet"); code != 0 {
		t.Fatalf("setup run: exit %d\n%s", code, errs)
	}
	csvFile := filepath.Join(dir, "reviews.csv")
	if err := os.WriteFile(csvFile, []byte("id,text\n1,hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newDB := func(name string) string { return filepath.Join(t.TempDir(), name) }

	tests := []struct {
		name string
		env  []string
		args []string
		code int
		// want are substrings of stderr (or stdout, for data).
		want []string
		// noFile must not exist afterwards.
		noFile string
		// onlyLines: stderr has exactly this many lines (the error printed once).
		onlyLines int
	}{
		{name: "missing required flag", args: []string{"retry", "--db", db}, code: 2,
			want: []string{"missing --stage", "sanitize|classify|aggregate"}, onlyLines: 1},
		{name: "export without --stage or --all", args: []string{"export", "--db", db}, code: 2,
			want: []string{"exactly one of --stage S or --all"}, onlyLines: 1},
		{name: "unknown flag", args: []string{"status", "--jsn", "--db", db}, code: 2,
			want: []string{"unknown flag --jsn", "did you mean --json?"}, onlyLines: 1},
		{name: "unknown command", args: []string{"stauts"}, code: 2, want: []string{`unknown command "stauts"`, "did you mean status?"}, onlyLines: 1},
		{name: "unknown dlq command", args: []string{"dlq", "lst", "--db", db}, code: 2, want: []string{`unknown command "dlq lst"`, "did you mean dlq list?"}, onlyLines: 1},
		{name: "unknown batch command", args: []string{"batch", "lst", "--db", db}, code: 2, want: []string{`unknown command "batch lst"`, "did you mean batch list?"}, onlyLines: 1},
		{name: "unknown job command", args: []string{"job", "shwo", "--db", db}, code: 2, want: []string{`unknown command "job shwo"`, "did you mean job show?"}, onlyLines: 1},
		{name: "bad value", args: []string{"run", "--db", newDB("v.db"), "--workers", "many"}, code: 2,
			want: []string{`--workers "many": want a whole number`}},
		{name: "value out of range", env: env, args: []string{"run", "--db", newDB("r.db"), "--workers", "0"}, code: 2,
			want: []string{"--workers: want at least 1"}},
		{name: "version", args: []string{"--version"}, code: 0, want: []string{"sawtooth version", "commit"}},
		{name: "missing input file", env: env, args: []string{"run", "--db", filepath.Join(dir, "t1.db"), "--input", filepath.Join(dir, "nosuch.csv")}, code: 2,
			want: []string{"nosuch.csv: no such file"}, noFile: filepath.Join(dir, "t1.db")},
		{name: "bad input format", env: env, args: []string{"run", "--db", filepath.Join(dir, "t2.db"), "--input", input, "--format", "json"}, code: 2,
			want: []string{`--format "json"`, "jsonl, csv, tsv"}, noFile: filepath.Join(dir, "t2.db")},
		{name: "unknown stage", args: []string{"export", "--db", db, "--stage", "clasify"}, code: 2, want: []string{"did you mean classify?"}},
		{name: "export tsv", args: []string{"export", "--db", db, "--stage", "classify", "--format", "tsv"}, code: 0, want: []string{"id\t", "\tlabel"}},
		{name: "db is an input file", args: []string{"status", "--db", csvFile}, code: 2,
			want: []string{"looks like an input file", "--input " + csvFile}},
		{name: "db is a directory", args: []string{"status", "--db", dir}, code: 1,
			want: []string{"is a directory", "reviews.db"}},
		{name: "db missing, a near one exists", args: []string{"status", "--db", filepath.Join(dir, "review.db")}, code: 2,
			want: []string{"no such database", "did you mean " + db}},
		{name: "config: unknown key", env: env,
			args: []string{"run", "--db", filepath.Join(dir, "t3.db"), "--config", config("typo.yaml", "model: gemini-2.5-flash\nrating-feild: stars\n")}, code: 2,
			want: []string{"line 2", `unknown key "rating-feild"`, `did you mean "rating-field"?`}, noFile: filepath.Join(dir, "t3.db")},
		{name: "config: a key indented under another", env: env,
			args: []string{"run", "--db", filepath.Join(dir, "t4.db"), "--config", config("indent.yaml", "labels: bug,praise\n  date-field: when\n")}, code: 2,
			want: []string{"line 2", "start every key in the first column"}, noFile: filepath.Join(dir, "t4.db")},
		{name: "config: a value line indented under a key", env: env,
			args: []string{"run", "--db", filepath.Join(dir, "t6.db"), "--config", config("fold.yaml", "labels: bug,praise\n  other\nmodel: gemini-2.5-flash\n")}, code: 2,
			want: []string{`line 2 is indented under "labels"`}, noFile: filepath.Join(dir, "t6.db")},
		{name: "config: missing file", env: env, args: []string{"run", "--db", filepath.Join(dir, "t5.db"), "--config", "nosuch.yaml"}, code: 2,
			want: []string{"config file nosuch.yaml: no such file"}, noFile: filepath.Join(dir, "t5.db")},
		{name: "config gives db and input fields", env: env,
			args: []string{"run", "--quiet", "--config", config("full.yaml", "db: "+filepath.Join(dir, "fromconfig.db")+"\ninput: "+input+"\nid-field: id\ntext-field: text\ngroup-by:\n  - app\n")},
			code: 0, want: []string{"40 new"}},
		{name: "group-by a field no row has", env: env, args: []string{"run", "--db", newDB("g.db"), "--input", input, "--quiet", "--group-by", "country"}, code: 0,
			want: []string{`warning: input`, `--group-by "country": no value in 40 of 40 rows`}},
		{name: "unknown SAWTOOTH_ variable", env: []string{"SAWTOOTH_MODLE=x"}, args: []string{"status", "--db", db}, code: 0,
			want: []string{"SAWTOOTH_MODLE names no flag", "did you mean SAWTOOTH_MODEL?"}},
		{name: "help lists the stages and groups flags", args: []string{"rerun", "--help"}, code: 0,
			want: []string{"sanitize|classify|aggregate", "Limiter", "Stage classify", "--dry-run"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := sawtooth(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, tail(out, 2000), tail(errs, 2000))
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) && !strings.Contains(out, w) {
					t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", w, tail(out, 2000), tail(errs, 2000))
				}
			}
			if tt.onlyLines > 0 {
				if n := strings.Count(strings.TrimSpace(errs), "\n") + 1; n != tt.onlyLines {
					t.Errorf("stderr has %d lines, want %d (printed once, no help dump):\n%s", n, tt.onlyLines, errs)
				}
			}
			if tt.noFile != "" {
				if _, err := os.Stat(tt.noFile); !os.IsNotExist(err) {
					t.Errorf("%s exists after a command that failed on its arguments (%v)", tt.noFile, err)
				}
			}
		})
	}
}

// TestCLI_FailedCommandChangesNothing checks, for each way a command can
// fail on its arguments against an existing database, that the database
// is byte for byte as it was and no file appeared beside it.
func TestCLI_FailedCommandChangesNothing(t *testing.T) {
	t.Parallel()
	_, url := startSim(t, faultSim(62))
	env := simEnv(url)
	dir := t.TempDir()
	input := writeItems(t, dir, 150, 62)
	db := filepath.Join(dir, "b.db")
	if code, _, errs := sawtooth(t, env, "run", "--db", db, "--input", input, "--quiet", "--labels", "bug,praise,other"); code != 0 {
		t.Fatalf("setup run: exit %d\n%s", code, errs)
	}
	prompt := filepath.Join(dir, "v2.tmpl")
	if err := os.WriteFile(prompt, []byte("Classify: {{.Text}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	listDir := func() []string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"export of a misspelt column", []string{"export", "--db", db, "--all", "--columns", "id,labl"}, 2,
			[]string{`no column "labl"`, "the columns are: id,status"}},
		{"rerun with a misspelt stage", []string{"rerun", "--db", db, "--from-stage", "clasify", "--labels", "bug,praise,other"}, 2,
			[]string{`"clasify" is not a stage`, "did you mean classify?"}},
		{"rerun above --confirm-above without --yes", []string{"rerun", "--db", db, "--from-stage", "classify", "--quiet"}, 2,
			[]string{"would re-run classify and aggregate for 14", "more than --confirm-above 100", "--yes"}},
		{"rerun --dry-run", []string{"rerun", "--db", db, "--from-stage", "classify", "--dry-run"}, 0,
			[]string{"would re-run classify and aggregate for 14", "calls", "input tokens", "$"}},
		{"changed labels refused with a diff", []string{"run", "--db", db, "--quiet", "--labels", "bug,praise"}, 2,
			[]string{`labels: "bug,praise,other" -> "bug,praise"`, "--rerun-changed --dry-run"}},
		{"changed prompt refused with a diff", []string{"run", "--db", db, "--quiet", "--labels", "bug,praise,other", "--prompt-file", prompt}, 2,
			[]string{"prompt: built-in -> sha ", "(file " + prompt + ")"}},
		{"--rerun-changed --dry-run", []string{"run", "--db", db, "--quiet", "--labels", "bug", "--rerun-changed", "--dry-run"}, 0,
			[]string{"would re-run classify and aggregate"}},
		{"missing input", []string{"run", "--db", db, "--input", filepath.Join(dir, "nosuch.jsonl")}, 2, []string{"no such file"}},
		{"bad format", []string{"run", "--db", db, "--input", input, "--format", "xml"}, 2, []string{`--format "xml"`}},
		{"retry at no stage", []string{"retry", "--db", db, "--stage", "nope"}, 2, []string{`"nope" is not a stage`}},
		{"dlq requeue at no stage", []string{"dlq", "requeue", "--db", db, "--stage", "nope", "--all"}, 2, []string{`"nope" is not a stage`}},
		{"dlq requeue without --id or --all", []string{"dlq", "requeue", "--db", db, "--stage", "classify"}, 2, []string{"exactly one of --id ID or --all"}},
		{"bad emoji policy", []string{"run", "--db", db, "--emoji", "sometimes"}, 2, []string{"--emoji"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, files := fileHash(t, db), listDir()
			code, out, errs := sawtooth(t, env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tt.code, tail(out, 1500), tail(errs, 1500))
			}
			for _, w := range tt.want {
				if !strings.Contains(out+errs, w) {
					t.Errorf("output lacks %q:\n%s%s", w, tail(out, 1500), tail(errs, 1500))
				}
			}
			if fileHash(t, db) != before {
				t.Errorf("%v changed the database", tt.args)
			}
			if now := listDir(); !slices.Equal(now, files) {
				t.Errorf("files beside the DB changed: %v -> %v", files, now)
			}
		})
	}

	// A rerun that names no --labels keeps the recorded ones: with --yes
	// it re-runs under bug,praise,other, not the default label set.
	code, _, errs := sawtooth(t, env, "rerun", "--db", db, "--from-stage", "classify", "--quiet", "--yes")
	if code != 0 {
		t.Fatalf("rerun --yes: exit %d\n%s", code, errs)
	}
	if n := strings.Count(errs, "re-queued"); n != 1 {
		t.Errorf("rerun printed %d re-queued lines, want 1:\n%s", n, errs)
	}
	if !strings.Contains(errs, "keeping the settings") || !strings.Contains(errs, "--labels") {
		t.Errorf("rerun did not say it kept the recorded labels:\n%s", errs)
	}
	for id, label := range labels(t, db) {
		if !slices.Contains([]string{"bug", "praise", "other"}, label) {
			t.Errorf("item %s classified %q after a rerun that kept bug,praise,other", id, label)
		}
	}
}

// TestCLI_TerminalOutputIsEscaped puts ESC sequences in ids and checks
// that dlq list and dlq show print them escaped.
func TestCLI_TerminalOutputIsEscaped(t *testing.T) {
	t.Parallel()
	_, url := startSim(t, faultSim(63))
	dir := t.TempDir()
	input := filepath.Join(dir, "hostile.jsonl")
	body := `{"id":"ok1","text":"fine app"}` + "\n" +
		`{"id":"evil\u001b[2J\u001b]0;pwned\u0007","text":"   "}` + "\n" +
		`{"id":"c1\u009b31m","text":"\t"}` + "\n"
	if err := os.WriteFile(input, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "h.db")
	if code, _, errs := sawtooth(t, simEnv(url), "run", "--db", db, "--input", input, "--quiet"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	raw := regexp.MustCompile("[\x00-\x08\x0b-\x1f\x7f]|\u009b")
	for _, args := range [][]string{
		{"dlq", "list", "--db", db},
		{"dlq", "list", "--db", db, "--json"},
		{"dlq", "show", "--db", db, "--id", "evil\x1b[2J\x1b]0;pwned\x07"},
		{"status", "--db", db},
	} {
		code, out, errs := sawtooth(t, nil, args...)
		if code != 0 {
			t.Errorf("%q: exit %d\n%s", args, code, errs)
		}
		if m := raw.FindString(out + errs); m != "" {
			t.Errorf("%q printed the raw control character %q:\n%q", args, m, out+errs)
		}
		if args[1] == "list" && args[len(args)-1] == db && !strings.Contains(out, `evil\x1b[2J`) {
			t.Errorf("dlq list does not show the id escaped:\n%s", out)
		}
	}
}
