package job

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Stored is a job as the database keeps it: the job file's contents as
// decoded (defaults left out) and the content hash of every file it
// names, so a later run can tell an edited prompt from an unchanged one.
type Stored struct {
	// YAML is the job, re-encoded.
	YAML string `json:"yaml"`
	// Files maps each prompt, system and schema file, as written in the
	// job, to a hash of its contents when the job ran.
	Files map[string]string `json:"files,omitempty"`
	// Dir is the job file's directory (absolute): a resume without the
	// job file reads the files the job names from there.
	Dir string `json:"dir,omitempty"`
	// Flags says a run's flags defined the job (the CLI compiled them),
	// not a job file: a later run from flags on the database compares
	// its own flags with it, and one with no stage flags resumes it.
	Flags bool `json:"flags,omitempty"`
}

// WithDir is s with Dir set to dir made absolute.
func (s Stored) WithDir(dir string) Stored {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	s.Dir = dir
	return s
}

// Snapshot is what the database records for j.
func (j *Job) Snapshot() (Stored, error) {
	files, err := j.Files()
	if err != nil {
		return Stored{}, err
	}
	y, err := encodeYAML(j)
	if err != nil {
		return Stored{}, err
	}
	return Stored{YAML: y, Files: files}, nil
}

func encodeYAML(j *Job) (string, error) {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(j); err != nil {
		return "", fmt.Errorf("encode job: %w", err)
	}
	return b.String(), nil
}

// Anchored is s as a job file that runs the same job wherever it is
// saved: its db is db (unchanged when db is ""), and the input and every
// file the job names are absolute, read from s.Dir. As stored, the
// input and files are relative to the job file's directory and db to
// the directory the run started in; printed as they were, a job saved
// anywhere but the original directory named another database, and run
// -f with it paid for every item again.
func (s Stored) Anchored(db string) (Stored, error) {
	j, err := s.Job("stored job")
	if err != nil {
		return Stored{}, err
	}
	if db != "" {
		j.DB = db
	}
	if s.Dir == "" {
		y, err := encodeYAML(j)
		s.YAML = y
		return s, err
	}
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(s.Dir, p)
	}
	j.Input.Path = abs(j.Input.Path)
	for _, l := range j.LLMStages() {
		l.PromptFile, l.SystemFile, l.Output.SchemaFile = abs(l.PromptFile), abs(l.SystemFile), abs(l.Output.SchemaFile)
	}
	files := make(map[string]string, len(s.Files))
	for f, h := range s.Files {
		files[abs(f)] = h
	}
	y, err := encodeYAML(j)
	if err != nil {
		return Stored{}, err
	}
	s.YAML, s.Files = y, files
	return s, nil
}

// Marshal encodes s for the database.
func (s Stored) Marshal() []byte {
	b, _ := json.Marshal(s)
	return b
}

// UnmarshalStored decodes what Marshal wrote.
func UnmarshalStored(b []byte) (Stored, error) {
	var s Stored
	err := json.Unmarshal(b, &s)
	return s, err
}

// Show renders s as a job file: the YAML, then the file hashes as
// comments.
func (s Stored) Show() string {
	var b strings.Builder
	if s.Flags {
		b.WriteString("# the job a run's flags defined, every setting written out\n")
	}
	b.WriteString("# the job as it was last run; `sawtooth run -f FILE` with this file resumes it\n")
	b.WriteString(s.YAML)
	if len(s.Files) > 0 {
		b.WriteString("# file contents when it ran (sha256, first 8 bytes):\n")
		for _, f := range slices.Sorted(maps.Keys(s.Files)) {
			fmt.Fprintf(&b, "#   %s %s\n", f, s.Files[f])
		}
	}
	return b.String()
}

// Job decodes the stored job. file names the database in messages; its
// directory anchors the relative paths the job names, as the job file's
// did (the caller sets Dir when it knows better).
func (s Stored) Job(file string) (*Job, error) {
	d := newDecoder(file + " (stored job)")
	j := &Job{File: file}
	root := d.parse([]byte(s.YAML))
	if root != nil {
		d.decodeRoot(root, j)
	}
	if err := d.result(); err != nil {
		return nil, err
	}
	return j, nil
}

// Change is one difference between two jobs.
type Change struct {
	// Stage is the stage's name, "" for a key outside the stage list.
	Stage string
	// Key is the changed key within the stage (or the job), e.g.
	// "model", "prompt_file (contents)"; "" when the whole stage was
	// added or removed.
	Key string
	// Old and New are the values ("" when absent).
	Old, New string
}

// String is the change as the diff prints it: "stage.key: old -> new",
// or "stage S: added" / "stage S: removed".
func (c Change) String() string {
	where := c.Stage
	switch {
	case where == "":
		where = c.Key
	case c.Key != "":
		where += "." + c.Key
	}
	switch {
	case c.Key == "" && c.Old == "":
		return fmt.Sprintf("stage %s: added", c.Stage)
	case c.Key == "" && c.New == "":
		return fmt.Sprintf("stage %s: removed", c.Stage)
	}
	return fmt.Sprintf("%s: %s -> %s", where, orNone(c.Old), orNone(c.New))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Diff lists what changed from old to new: the job's own keys, each
// stage's keys (by stage name, so a stage inserted between others shows
// as one addition), and the contents of the files a stage names.
func Diff(old, new Stored) ([]Change, error) {
	oj, err := old.Job("stored")
	if err != nil {
		return nil, err
	}
	nj, err := new.Job("new")
	if err != nil {
		return nil, err
	}
	var out []Change
	oTop, nTop := *oj, *nj
	oTop.Stages, nTop.Stages = nil, nil
	out = append(out, diffValues("", flatten(&oTop), flatten(&nTop))...)

	oByName, nByName := map[string]Stage{}, map[string]Stage{}
	for _, s := range oj.Stages {
		oByName[s.Name()] = s
	}
	for _, s := range nj.Stages {
		nByName[s.Name()] = s
	}
	for _, s := range oj.Stages {
		if _, ok := nByName[s.Name()]; !ok {
			out = append(out, Change{Stage: s.Name(), Old: s.Kind()})
		}
	}
	for _, s := range nj.Stages {
		o, ok := oByName[s.Name()]
		if !ok {
			out = append(out, Change{Stage: s.Name(), New: s.Kind()})
			continue
		}
		out = append(out, diffValues(s.Name(), flatten(o), flatten(s))...)
		if s.LLM != nil && o.LLM != nil {
			for _, f := range []struct{ key, o, n string }{
				{"prompt_file", o.LLM.PromptFile, s.LLM.PromptFile},
				{"system_file", o.LLM.SystemFile, s.LLM.SystemFile},
				{"output.schema_file", o.LLM.Output.SchemaFile, s.LLM.Output.SchemaFile},
			} {
				if f.o != "" && f.o == f.n && old.Files[f.o] != new.Files[f.n] {
					out = append(out, Change{Stage: s.Name(), Key: f.key + " (contents of " + f.n + ")", Old: old.Files[f.o], New: new.Files[f.n]})
				}
			}
		}
	}
	return out, nil
}

// diffValues compares two flattened values key by key.
func diffValues(stage string, o, n map[string]string) []Change {
	keys := mapKeys(o)
	for k := range n {
		if _, ok := o[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []Change
	for _, k := range keys {
		if o[k] != n[k] {
			out = append(out, Change{Stage: stage, Key: k, Old: o[k], New: n[k]})
		}
	}
	return out
}

// flatten maps every leaf of v (as YAML would write it) to its dotted
// path; lists of scalars are one value.
func flatten(v any) map[string]string {
	b, _ := yaml.Marshal(v)
	var tree any
	_ = yaml.Unmarshal(b, &tree)
	out := map[string]string{}
	var walk func(prefix string, t any)
	walk = func(prefix string, t any) {
		switch t := t.(type) {
		case map[string]any:
			for k, x := range t {
				// A stage entry is {kind: config}: the kind is not a key.
				if prefix == "" && len(t) == 1 && slices.Contains(stageKinds, k) {
					walk("", x)
					continue
				}
				walk(join(prefix, k), x)
			}
		case []any:
			parts := make([]string, len(t))
			for i, x := range t {
				if _, scalar := x.(map[string]any); scalar {
					walk(fmt.Sprintf("%s[%d]", prefix, i), x)
					continue
				}
				parts[i] = fmt.Sprint(x)
			}
			out[prefix] = "[" + strings.Join(parts, ", ") + "]"
		case nil:
		default:
			out[prefix] = fmt.Sprint(t)
		}
	}
	walk("", tree)
	return out
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
