package job

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sawtooth-dev/sawtooth/stages"
)

// Backends a job can name.
const (
	// BackendGemini is the Gemini API (an API key in GEMINI_API_KEY).
	BackendGemini = "gemini"
	// BackendVertex is Vertex AI (a project and a location; credentials
	// by Application Default Credentials).
	BackendVertex = "vertex"
)

// Stage modes an LLM stage can name.
const (
	// ModeOnline sends one generateContent call per item.
	ModeOnline = "online"
	// ModeBatch sends items through the Batch API (half price).
	ModeBatch = "batch"
	// ModeAuto sends items through the Batch API first, then online
	// calls for what the batch jobs did not answer by their deadline.
	ModeAuto = "auto"
)

// DefaultModel is an LLM stage's model when it names none.
const DefaultModel = "gemini-2.5-flash"

// Job is one job file: everything `sawtooth run -f` needs.
type Job struct {
	// DB is the database file the job runs in.
	DB string `yaml:"db"`
	// Input is the items to ingest; empty Path: only resume.
	Input Input `yaml:"input"`
	// Backend is BackendGemini (the default) or BackendVertex.
	Backend string `yaml:"backend,omitempty"`
	// Project and Location are the Vertex AI project and region;
	// "" means GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION.
	Project  string `yaml:"project,omitempty"`
	Location string `yaml:"location,omitempty"`
	// BaseURL overrides the API's root URL (a simulator or a proxy).
	BaseURL string `yaml:"base_url,omitempty"`
	// Stages is the pipeline, in order.
	Stages []Stage `yaml:"stages"`
	// Workers is the worker count of each local (non-API) stage; 0 means
	// pipeline.DefaultWorkers.
	Workers int `yaml:"workers,omitempty" json:",omitempty"`
	// Fleet tunes a run on a PostgreSQL database shared by many workers.
	Fleet *Fleet `yaml:"fleet,omitempty" json:",omitempty"`

	// Dir is the directory relative file paths (prompt_file,
	// schema_file, input.path) are read from: the job file's.
	Dir string `yaml:"-"`
	// File is the job file's path, for messages.
	File string `yaml:"-"`

	// lines maps each key path to its line, for checks after decoding
	// (CheckSample).
	lines map[string]int
}

// Input says where the items come from and which fields are what.
type Input struct {
	// Path is a JSONL, CSV or TSV file.
	Path string `yaml:"path,omitempty"`
	// Format is jsonl, csv or tsv; "" means from the extension.
	Format string `yaml:"format,omitempty"`
	// ID and Text name the id and text fields; "" means "id" and "text".
	ID   string `yaml:"id,omitempty"`
	Text string `yaml:"text,omitempty"`
	// MaxLineBytes and MaxFieldLines bound a line and a quoted CSV
	// field; 0 means ingest's defaults.
	MaxLineBytes  int `yaml:"max_line_bytes,omitempty" json:",omitempty"`
	MaxFieldLines int `yaml:"max_field_lines,omitempty" json:",omitempty"`
	// DateFormat is the Go layout of the date field when it is none of
	// the common ones; RatingRange is the rating field's MIN-MAX. ""
	// means ingest's defaults.
	DateFormat  string `yaml:"date_format,omitempty" json:",omitempty"`
	RatingRange string `yaml:"rating_range,omitempty" json:",omitempty"`
}

// Stage is one entry of the stage list: exactly one of its fields is set.
type Stage struct {
	Sanitize  *Sanitize  `yaml:"sanitize,omitempty"`
	LLM       *LLM       `yaml:"llm,omitempty"`
	Aggregate *Aggregate `yaml:"aggregate,omitempty"`
}

// Sanitize configures the sanitize stage.
type Sanitize struct {
	// MaxChars truncates texts to this many characters; 0 means 4000.
	MaxChars int `yaml:"max_chars,omitempty"`
	// Emoji is keep, strip or describe; "" means keep.
	Emoji string `yaml:"emoji,omitempty"`
}

// LLM configures one LLM stage.
type LLM struct {
	// Name is the stage's name (its queue, outputs and dead letters), and
	// how later stages refer to its output.
	Name string `yaml:"name"`
	// Preset, when "classify", makes this the built-in classify stage:
	// the built-in prompt (unless prompt or prompt_file replaces it) and
	// system instruction over the label set, the one stage that runs
	// mode batch or auto. A run from flags compiles to it.
	Preset string `yaml:"preset,omitempty" json:",omitempty"`
	// Model is the model asked; "" means DefaultModel.
	Model string `yaml:"model,omitempty"`
	// Prompt and PromptFile give the prompt template (one of them, or
	// neither for the item's text): a text/template seeing .ID, .Text,
	// .Fields.x and .Out.<stage>.<field>.
	Prompt     string `yaml:"prompt,omitempty"`
	PromptFile string `yaml:"prompt_file,omitempty"`
	// System and SystemFile give the system instruction (one or neither).
	System     string `yaml:"system,omitempty"`
	SystemFile string `yaml:"system_file,omitempty"`
	// Output is the answer's shape: a label set or a JSON schema file.
	Output Output `yaml:"output"`
	// When, if set, is an expression over earlier outputs and the item's
	// fields (`classify.label == "bug"`); items for which it is false
	// skip the stage (recorded as skipped, not dead).
	When string `yaml:"when,omitempty"`
	// Limiter bounds the stage's concurrency.
	Limiter Limiter `yaml:"limiter,omitempty"`
	// Mode is online (the default), batch or auto.
	Mode string `yaml:"mode,omitempty"`
	// Batch tunes batch and auto modes.
	Batch *Batch `yaml:"batch,omitempty" json:",omitempty"`
	// Timeout bounds each request, as a Go duration; "" means the
	// stage's default.
	Timeout string `yaml:"timeout,omitempty" json:",omitempty"`
	// MaxWait, MaxOutage and MaxRefused are the stage's stops, as Go
	// durations ("" means the engine's defaults): the longest 429
	// retryDelay waited for, how long the API may stay unreachable, and
	// how long every call may be refused ("0s": never stop for refusals).
	MaxWait    string `yaml:"max_wait,omitempty" json:",omitempty"`
	MaxOutage  string `yaml:"max_outage,omitempty" json:",omitempty"`
	MaxRefused string `yaml:"max_refused,omitempty" json:",omitempty"`
	// Price overrides the model's list price.
	Price *Price `yaml:"price,omitempty" json:",omitempty"`
	// MaxAttempts is the transient-error budget per item; 0 means 5.
	MaxAttempts int `yaml:"max_attempts,omitempty"`
	// MaxOutputTokens caps each answer; 0 means the stage's default.
	MaxOutputTokens int `yaml:"max_output_tokens,omitempty"`
	// Tier is the service tier the stage's online calls ask for:
	// standard (the default), flex (half price, minutes, retried when
	// shed), priority, or auto (flex, then standard for an item flex has
	// not answered within FlexDeadline of its first flex call).
	Tier string `yaml:"tier,omitempty"`
	// FlexDeadline is how long an item stays on flex before it goes to
	// standard, as a Go duration ("45m"); "" means 30m with tier auto and
	// flex only with tier flex. Only with tier auto or flex.
	FlexDeadline string `yaml:"flex_deadline,omitempty"`
}

// Deadline is FlexDeadline parsed; 0 when not given or not a duration
// (Load has reported that).
func (l *LLM) Deadline() time.Duration {
	d, _ := time.ParseDuration(l.FlexDeadline)
	return d
}

// Output is an LLM stage's answer shape: exactly one field is set.
type Output struct {
	// Label is a closed label set: the answer is {label, confidence, reason}.
	Label []string `yaml:"label,omitempty"`
	// SchemaFile is a JSON schema file the answer must match.
	SchemaFile string `yaml:"schema_file,omitempty"`
}

// Limiter configures one stage's AIMD limiter; zeros mean the defaults
// (or, for Start, the limit the stage learned in earlier runs).
type Limiter struct {
	Start   int `yaml:"start,omitempty"`
	Floor   int `yaml:"floor,omitempty"`
	Ceiling int `yaml:"ceiling,omitempty"`
	// Fixed, when above 0, is a fixed pool of calls in flight, no
	// adaptation (for comparisons).
	Fixed int `yaml:"fixed,omitempty" json:",omitempty"`
	// Decrease is the multiplicative decrease on a 429, in (0, 1);
	// Cooldown the longest pause in growth after one (a Go duration).
	Decrease float64 `yaml:"decrease,omitempty" json:",omitempty"`
	Cooldown string  `yaml:"cooldown,omitempty" json:",omitempty"`
	// TPM and RPM are the quota, when known: tokens and requests per
	// minute the limiter paces to.
	TPM int `yaml:"tpm,omitempty" json:",omitempty"`
	RPM int `yaml:"rpm,omitempty" json:",omitempty"`
}

// Aggregate configures the aggregate stage.
type Aggregate struct {
	// GroupBy lists the fields to group by ("month" from Date); nil means
	// app and month.
	GroupBy []string `yaml:"group_by,omitempty"`
	// Rating and Date name the rating and date fields.
	Rating string `yaml:"rating,omitempty"`
	Date   string `yaml:"date,omitempty"`
	// Count is the output field counted, as stage.field; "" means
	// classify.label.
	Count string `yaml:"count,omitempty"`
}

// Kind is the stage's kind: "sanitize", "llm" or "aggregate".
func (s Stage) Kind() string {
	switch {
	case s.Sanitize != nil:
		return "sanitize"
	case s.LLM != nil:
		return "llm"
	case s.Aggregate != nil:
		return "aggregate"
	}
	return ""
}

// Name is the stage's name: the kind for sanitize and aggregate, the
// configured name of an LLM stage.
func (s Stage) Name() string {
	if s.LLM != nil {
		return s.LLM.Name
	}
	return s.Kind()
}

var stageKinds = []string{"sanitize", "llm", "aggregate"}

// decodeNode reads `- kind: {config}`: a mapping with exactly one key.
func (s *Stage) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		what := describe(n)
		if n.Kind == yaml.MappingNode {
			what = fmt.Sprintf("%d keys", len(n.Content)/2)
		}
		d.errorf(n.Line, path, "want one stage (`- sanitize: {...}`, `- llm: {...}` or `- aggregate: {...}`), got %s: start each stage with its own `- `", what)
		return
	}
	k, val := n.Content[0], n.Content[1]
	key := join(path, k.Value)
	d.lines[key] = k.Line
	var target reflect.Value
	switch k.Value {
	case "sanitize":
		s.Sanitize = &Sanitize{}
		target = reflect.ValueOf(s.Sanitize).Elem()
	case "llm":
		s.LLM = &LLM{}
		target = reflect.ValueOf(s.LLM).Elem()
	case "aggregate":
		s.Aggregate = &Aggregate{}
		target = reflect.ValueOf(s.Aggregate).Elem()
	default:
		d.errorf(k.Line, key, "unknown stage kind%s (valid: %s)", didYouMean(k.Value, stageKinds), strings.Join(stageKinds, ", "))
		return
	}
	if val.Tag == "!!null" {
		return // `- sanitize:` alone: the defaults
	}
	d.decode(val, target, key)
}

// Load reads and decodes the job file at path, then validates it (reading
// the prompt and schema files it names). A problem is returned as Errors.
func Load(path string) (*Job, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &NoFileError{Path: path}
	case err != nil:
		return nil, fmt.Errorf("job file %s: %w", path, err)
	}
	return Decode(path, data)
}

// Decode decodes and validates a job file's contents; file names it in
// messages and its directory anchors relative paths.
func Decode(file string, data []byte) (*Job, error) {
	d := newDecoder(file)
	j := &Job{File: file, Dir: filepath.Dir(file)}
	root := d.parse(data)
	if root == nil {
		if len(d.errs) == 0 {
			d.errs = append(d.errs, &Error{File: file, Msg: ErrEmpty.Error() + ": write a job", Err: ErrEmpty})
		}
		return nil, d.result()
	}
	d.decodeRoot(root, j)
	// Values are validated even when some keys did not decode, so that a
	// file's problems come in one round; a value problem at or around a
	// key that did not decode repeats it, and is left out.
	bad := slices.Clone(d.errs)
	j.validate(d)
	d.errs = slices.DeleteFunc(d.errs, func(e *Error) bool { return !slices.Contains(bad, e) && overlaps(e.Key, bad) })
	if err := d.result(); err != nil {
		return nil, err
	}
	j.lines = d.lines
	return j, nil
}

// overlaps reports whether key is one of errs' keys, inside one, or
// holds one (stages[0].llm holds stages[0].llm.nmae).
func overlaps(key string, errs []*Error) bool {
	for _, e := range errs {
		if e.Key == "" || key == e.Key || under(key, e.Key) || under(e.Key, key) {
			return true
		}
	}
	return false
}

// under reports whether key is a path inside parent.
func under(key, parent string) bool {
	return parent != "" && strings.HasPrefix(key, parent) && len(key) > len(parent) && (key[len(parent)] == '.' || key[len(parent)] == '[')
}

var stageName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// validate checks values once every type is right. It reads the prompt
// and schema files, so a missing one is reported now, not mid-run.
func (j *Job) validate(d *decoder) {
	if j.DB == "" {
		d.errorf(1, "db", "missing: name the database file, e.g. `db: reviews.db`")
	}
	switch j.Input.Format {
	case "", "jsonl", "csv", "tsv":
	default:
		d.at("input.format", "%q is not a format: write jsonl, csv or tsv, or leave it out to go by the extension", j.Input.Format)
	}
	switch j.Backend {
	case "", BackendGemini:
		vertexByEnv := j.Backend == "" && slices.Contains([]string{"1", "true"}, strings.ToLower(os.Getenv("GOOGLE_GENAI_USE_VERTEXAI")))
		if !vertexByEnv && (j.Project != "" || j.Location != "") {
			d.at("project", "project and location are for `backend: vertex`: add it, or remove them")
		}
	case BackendVertex:
	default:
		d.at("backend", "%q is not a backend%s: write gemini or vertex", j.Backend, didYouMean(j.Backend, []string{BackendGemini, BackendVertex}))
	}
	j.checkEngine(d)
	if len(j.Stages) == 0 {
		d.at("stages", "no stages: list at least one LLM stage")
		return
	}
	names := map[string]int{}
	var earlier []string
	outputs := map[string][]string{} // each earlier LLM stage's output fields
	for i, s := range j.Stages {
		path := fmt.Sprintf("stages[%d]", i)
		if s.Kind() == "" {
			continue
		}
		name := s.Name()
		if first, dup := names[name]; dup {
			d.at(path+"."+s.Kind(), "stage name %q is already used by stages[%d]: give each stage its own name", name, first)
		}
		names[name] = i
		switch {
		case s.Sanitize != nil:
			j.validateSanitize(d, path+".sanitize", s.Sanitize, i)
		case s.LLM != nil:
			j.validateLLM(d, path+".llm", s.LLM, earlier, outputs)
			if f := j.outputFields(s.LLM); f != nil {
				outputs[name] = f
			}
		case s.Aggregate != nil:
			j.validateAggregate(d, path+".aggregate", s.Aggregate, earlier, outputs, i)
		}
		earlier = append(earlier, name)
	}
}

func (j *Job) validateSanitize(d *decoder, path string, s *Sanitize, i int) {
	if i != 0 {
		d.at(path, "sanitize must be the first stage: move it to the top of the list")
	}
	if s.MaxChars < 0 {
		d.at(path+".max_chars", "%d is negative: write a number of characters, or leave it out for 4000", s.MaxChars)
	}
	switch strings.ToLower(s.Emoji) {
	case "", "keep", "strip", "describe":
	default:
		d.at(path+".emoji", "%q is not an emoji policy: write keep, strip or describe", s.Emoji)
	}
}

func (j *Job) validateAggregate(d *decoder, path string, a *Aggregate, earlier []string, outputs map[string][]string, i int) {
	if i != len(j.Stages)-1 {
		d.at(path, "aggregate must be the last stage: move it to the end of the list")
	}
	if a.Count == "" {
		if !slices.Contains(earlier, "classify") {
			d.at(path, "no stage named classify to count: set `count: STAGE.FIELD` (one of %s)", strings.Join(earlier, ", "))
		}
		return
	}
	stage, field, ok := strings.Cut(a.Count, ".")
	if !ok || field == "" {
		d.at(path+".count", "%q: write STAGE.FIELD, e.g. classify.label", a.Count)
		return
	}
	if !slices.Contains(earlier, stage) {
		d.at(path+".count", "no earlier stage named %q%s (earlier stages: %s)", stage, didYouMean(stage, earlier), strings.Join(earlier, ", "))
	} else if msg := checkOutputRef(outputs, stage, field); msg != "" {
		d.at(path+".count", "%q: %s: every item would count as \"unknown\"", a.Count, msg)
	}
}

func (j *Job) validateLLM(d *decoder, path string, l *LLM, earlier []string, outputs map[string][]string) {
	switch {
	case l.Name == "":
		d.at(path, "missing name: give the stage a name, e.g. `name: classify`")
	case !stageName.MatchString(l.Name):
		d.at(path+".name", "%q: a stage name is lowercase letters, digits and _, starting with a letter", l.Name)
	case l.Name == "sanitize" || l.Name == "aggregate":
		d.at(path+".name", "%q is a built-in stage's name: choose another", l.Name)
	}
	if l.Prompt != "" && l.PromptFile != "" {
		d.at(path+".prompt_file", "give prompt or prompt_file, not both")
	}
	if l.System != "" && l.SystemFile != "" {
		d.at(path+".system_file", "give system or system_file, not both")
	}
	for _, f := range []struct{ key, file string }{{"prompt_file", l.PromptFile}, {"system_file", l.SystemFile}} {
		if f.file == "" {
			continue
		}
		if _, err := j.ReadFile(f.file); err != nil {
			d.at(path+"."+f.key, "%v", err)
		}
	}
	switch {
	case len(l.Output.Label) > 0 && l.Output.SchemaFile != "":
		d.at(path+".output", "give label or schema_file, not both")
	case len(l.Output.Label) == 0 && l.Output.SchemaFile == "":
		d.at(path+".output", "missing: give `output: {label: [a, b]}` or `output: {schema_file: FILE}`")
	case len(l.Output.Label) > 0:
		seen := map[string]bool{}
		for i, lab := range l.Output.Label {
			k := strings.ToLower(strings.TrimSpace(lab))
			if k == "" || k != strings.ToLower(lab) || seen[k] {
				d.at(fmt.Sprintf("%s.output.label[%d]", path, i), "label %q is blank, has surrounding spaces or appears twice", lab)
			}
			seen[k] = true
		}
	default:
		if _, err := j.ReadFile(l.Output.SchemaFile); err != nil {
			d.at(path+".output.schema_file", "%v", err)
		} else if err := checkSchema(j, l.Output.SchemaFile); err != nil {
			d.at(path+".output.schema_file", "%v", err)
		}
	}
	if l.When != "" {
		if err := checkWhen(l.When, earlier); err != nil {
			d.at(path+".when", "%v", err)
		}
		for _, msg := range checkWhenNames(l.When, outputs) {
			d.at(path+".when", "%q reads %s: the condition would never see it", l.When, msg)
		}
	}
	switch l.Mode {
	case "", ModeOnline, ModeBatch, ModeAuto:
	default:
		d.at(path+".mode", "%q is not a mode%s: write online, batch or auto", l.Mode, didYouMean(l.Mode, []string{ModeOnline, ModeBatch, ModeAuto}))
	}
	l.checkRun(d, path)
	j.checkPreset(d, path, l)
	lim := l.Limiter
	for _, f := range []struct {
		key string
		v   int
	}{{"start", lim.Start}, {"floor", lim.Floor}, {"ceiling", lim.Ceiling}} {
		if f.v < 0 {
			d.at(path+".limiter."+f.key, "%d is negative: write a number of calls in flight", f.v)
		}
	}
	if lim.Floor > 0 && lim.Ceiling > 0 && lim.Floor > lim.Ceiling {
		d.at(path+".limiter.floor", "floor %d is above ceiling %d", lim.Floor, lim.Ceiling)
	}
	if l.MaxAttempts < 0 {
		d.at(path+".max_attempts", "%d is negative", l.MaxAttempts)
	}
	if l.MaxOutputTokens < 0 {
		d.at(path+".max_output_tokens", "%d is negative", l.MaxOutputTokens)
	}
	l.checkTier(d, path)
}

// checkTier reports a tier or flex deadline the stage cannot use.
func (l *LLM) checkTier(d *decoder, path string) {
	if l.Tier != "" && !slices.Contains(stages.TierNames, l.Tier) {
		d.at(path+".tier", "%q is not a tier%s: write standard, flex, priority or auto", l.Tier, didYouMean(l.Tier, stages.TierNames))
		return
	}
	if err := CheckTierMode(l.Tier, l.Mode); err != nil {
		d.at(path+".tier", "%v: remove tier, or mode: batch", err)
	}
	if l.FlexDeadline == "" {
		return
	}
	switch dl, err := time.ParseDuration(l.FlexDeadline); {
	case err != nil || dl <= 0:
		d.at(path+".flex_deadline", "%q is not a positive duration: write e.g. 30m or 2h", l.FlexDeadline)
	case l.Tier != stages.TierAuto && l.Tier != stages.TierFlex:
		d.at(path+".flex_deadline", "needs `tier: flex` or `tier: auto` (flex first, standard after the deadline); tier is %q", orStandard(l.Tier))
	}
}

// CheckTierMode reports a tier a stage cannot ask for in mode: batch
// jobs carry no service tier (the Batch API has its own price), and no
// online call is left to a batch-mode stage. Auto mode's online calls use
// the tier. It is the one rule for a job file and for a run's flags.
func CheckTierMode(tier, mode string) error {
	if tier != "" && tier != stages.TierStandard && mode == ModeBatch {
		return fmt.Errorf("tier %s is for online calls: batch mode has its own price", tier)
	}
	return nil
}

func orStandard(tier string) string {
	if tier == "" {
		return stages.TierStandard
	}
	return tier
}

// ReadFile reads a file the job names, relative to the job file's
// directory.
func (j *Job) ReadFile(name string) ([]byte, error) {
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(j.Dir, p)
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("file %s not found (paths are relative to the job file's directory)", p)
	}
	return b, err
}

// LLMStages returns the job's LLM stages, in order.
func (j *Job) LLMStages() []*LLM {
	var out []*LLM
	for _, s := range j.Stages {
		if s.LLM != nil {
			out = append(out, s.LLM)
		}
	}
	return out
}

// decodeRoot decodes a whole job document into j.
func (d *decoder) decodeRoot(root *yaml.Node, j *Job) {
	d.decode(root, reflect.ValueOf(j).Elem(), "")
}
