package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// outputFields is the fields an LLM stage's output has (its labels'
// answer, or its schema's properties); nil when its schema cannot be
// read (validate reports that).
func (j *Job) outputFields(l *LLM) []string {
	var schema []byte
	if len(l.Output.Label) == 0 {
		b, err := j.ReadFile(l.Output.SchemaFile)
		if err != nil {
			return nil
		}
		schema = b
	}
	f, err := stages.OutputFields(l.Output.Label, schema)
	if err != nil {
		return nil
	}
	return f
}

// OutputFields maps each LLM stage's name to the fields its output has,
// for stages.LLMConfig.EarlierOutputs.
func (j *Job) OutputFields() map[string][]string {
	out := map[string][]string{}
	for _, l := range j.LLMStages() {
		if f := j.outputFields(l); f != nil {
			out[l.Name] = f
		}
	}
	return out
}

// checkOutputRef checks that stage.field names a field of an earlier
// LLM stage's output (outputs: by stage name); a stage not in outputs
// (sanitize, or one whose schema is unreadable) is not checked here.
func checkOutputRef(outputs map[string][]string, stage, field string) string {
	fields, ok := outputs[stage]
	if !ok || slices.Contains(fields, field) {
		return ""
	}
	return fmt.Sprintf("stage %s's output has no field %q%s (its fields: %s)", stage, field, didYouMean(field, fields), strings.Join(fields, ", "))
}

// checkWhenNames checks the stage.field names a condition reads against
// the earlier stages' outputs.
func checkWhenNames(src string, outputs map[string][]string) []string {
	refs, err := stages.WhenRefs(src)
	if err != nil {
		return nil // checkWhen reports it
	}
	var out []string
	for _, r := range refs {
		if msg := checkOutputRef(outputs, r.Name, r.Key); msg != "" {
			out = append(out, fmt.Sprintf("%s.%s: %s", r.Name, r.Key, msg))
		}
	}
	return out
}

// CheckSample checks, before anything is ingested or sent, what only an
// item can show: each LLM stage's prompt template is rendered and each
// when: evaluated on sample (an input record, or one the database
// holds), with the earlier stages' outputs as their labels or schemas
// give them. A name the data lacks (a misspelt {{.Out.clasify.label}},
// {{.Feilds.app}}, an input field no record has) and a condition that
// fails on the sample (comparing a text field with a number) are Errors
// naming the stage's key, with the nearest valid name. fields is every
// field name the input's records have (sample's are added); a template
// may read any of them. A when: that compares a field the sample types
// (a number or true/false) with a text literal is an Error too: it
// would be false on every such item, with no error to show why. Nothing
// is sent.
func (j *Job) CheckSample(sample pipeline.Record, fields []string) error {
	return j.checkSample(sample, fields, nil)
}

// CheckSampleStored is CheckSample for an input about to join a database
// that already holds stored (one of its records): a when: comparing a
// field itself (fields.rating <= 2) is also an Error when sample types
// the field but stored, ingested before sawtooth kept types, has it as
// text that reads as that type. The condition would compare text in the
// old items and numbers in the new ones: "1" and 1 are not equal, and
// "string <= int" dead-letters the old ones.
func (j *Job) CheckSampleStored(sample pipeline.Record, fields []string, stored pipeline.Record) error {
	return j.checkSample(sample, fields, &stored)
}

func (j *Job) checkSample(sample pipeline.Record, fields []string, stored *pipeline.Record) error {
	d := newDecoder(j.File)
	d.lines = j.lines
	if d.lines == nil {
		d.lines = map[string]int{}
	}
	known := slices.Clone(fields)
	for k := range sample.Fields {
		if !slices.Contains(known, k) {
			known = append(known, k)
		}
	}
	slices.Sort(known)
	// The template sees every field some record has: one the sample
	// lacks reads "" rather than failing.
	filled := sample
	filled.Fields = make(map[string]string, len(known))
	for _, k := range known {
		filled.Fields[k] = sample.Fields[k]
	}
	outputs := map[string]json.RawMessage{}
	earlierFields := map[string][]string{}
	var earlier []string
	for i, s := range j.Stages {
		path := fmt.Sprintf("stages[%d]", i)
		switch {
		case s.Sanitize != nil:
			outputs["sanitize"], _ = json.Marshal(map[string]string{"text": sample.Text})
		case s.LLM != nil:
			// A type mismatch found here is the one message for its
			// condition: evaluating it would only add "int <= string".
			typed := checkWhenTypes(d, path+".llm.when", s.LLM.When, sample, stored)
			j.checkLLMSample(d, path+".llm", s.LLM, sample, filled, known, outputs, earlierFields, earlier, typed)
			if f := j.outputFields(s.LLM); f != nil {
				earlierFields[s.LLM.Name] = f
				var schema []byte
				if s.LLM.Output.SchemaFile != "" {
					schema, _ = j.ReadFile(s.LLM.Output.SchemaFile)
				}
				out, _ := stages.SampleOutput(s.LLM.Output.Label, schema)
				outputs[s.LLM.Name], _ = json.Marshal(out)
			}
		}
		earlier = append(earlier, s.Name())
	}
	return d.result()
}

func (j *Job) checkLLMSample(d *decoder, path string, l *LLM, sample, filled pipeline.Record, known []string,
	outputs map[string]json.RawMessage, earlierFields map[string][]string, earlier []string, whenReported bool) {
	src, key := l.Prompt, path+".prompt"
	if l.PromptFile != "" {
		b, err := j.ReadFile(l.PromptFile)
		if err != nil {
			return // validate reported it
		}
		src, key = string(b), path+".prompt_file"
	}
	it := pipeline.Item{Record: filled, Outputs: outputs}
	if err := stages.CheckPrompt(l.Name, src, l.Output.Label, it, earlierFields); err != nil {
		var k *stages.TemplateKeyError
		if errors.As(err, &k) {
			d.at(key, "%s", templateKeyMessage(k, earlier, earlierFields, known))
		} else {
			d.at(key, "%v", err)
		}
	}
	if l.When == "" || whenReported {
		return
	}
	refs, err := stages.WhenRefs(l.When)
	if err != nil {
		return // validate reported it
	}
	inSample := true
	for _, r := range refs {
		if r.Name != "fields" {
			continue
		}
		if !slices.Contains(known, r.Key) {
			d.at(path+".when", "%q reads fields.%s: no input record has a field %q%s (the input's fields: %s)", l.When, r.Key, r.Key, didYouMean(r.Key, known), orNone(strings.Join(known, ", ")))
			return
		}
		_, has := sample.Fields[r.Key]
		inSample = inSample && has
	}
	w, err := stages.CompileWhen(l.When, earlier)
	if err != nil || !inSample {
		return // a condition on fields the sample lacks is not judged by it
	}
	if _, err := w.Match(pipeline.Item{Record: sample, Outputs: outputs}); err != nil {
		msg := strings.TrimSuffix(err.Error(), ": fix the condition")
		if strings.Contains(msg, "string") {
			msg += fmt.Sprintf("; input fields are text unless the input gives them as JSON numbers or true/false, or a CSV column holds only numbers (this item's: %s); convert in the condition (int(fields.x), float(fields.x)) or fix the input", typesOf(sample))
		}
		d.at(path+".when", "%s: fix the condition before anything is sent", msg)
	}
}

// checkWhenTypes checks the comparisons src makes with an input field
// itself against the field's type in sample, and in stored when there
// is one (see CheckSampleStored). It reports whether it found one.
func checkWhenTypes(d *decoder, key, src string, sample pipeline.Record, stored *pipeline.Record) bool {
	if src == "" {
		return false
	}
	cmps, err := stages.WhenFieldCompares(src)
	if err != nil {
		return false // validate reported it
	}
	for _, c := range cmps {
		t := sample.Types[c.Key]
		if t != pipeline.FieldNumber && t != pipeline.FieldBool {
			continue
		}
		f := "fields." + c.Key
		if c.Literal == "string" {
			like := "2"
			if t == pipeline.FieldBool {
				like = "true"
			}
			if looksLike(c.Text, t) {
				like = c.Text
			}
			d.at(key, "%q compares %s with the text %q, but the input gives %s as a %s (%q in item %s): input fields keep their JSON types, so it would be false (or fail) on every such item; compare with a %s (%s %s %s), or with string(%s) to compare text; nothing was sent",
				src, f, c.Text, c.Key, t, sample.Fields[c.Key], sample.ID, t, f, c.Op, like, f)
			return true
		}
		if stored == nil {
			continue
		}
		if v, ok := stored.Fields[c.Key]; ok && stored.Types[c.Key] == "" && looksLike(v, t) {
			conv := "float(" + f + ")"
			if t == pipeline.FieldBool {
				conv = "string(" + f + ") == \"true\""
			}
			d.at(key, "%q compares %s, but the database holds items ingested before sawtooth kept input types, in which %s is text (%q in item %s), while the input gives it as a %s (%q in item %s): the condition would compare text in the old items and %ss in the new ones; write %s, which reads both alike; nothing was sent",
				src, f, c.Key, v, stored.ID, t, sample.Fields[c.Key], sample.ID, t, conv)
			return true
		}
	}
	return false
}

// looksLike reports whether v's text reads as a value of type t as
// ingest types it: a JSON number, or true/false.
func looksLike(v string, t pipeline.FieldType) bool {
	switch t {
	case pipeline.FieldNumber:
		// A JSON number, not a JSON string holding one.
		var n json.Number
		return v != "" && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Unmarshal([]byte(v), &n) == nil
	case pipeline.FieldBool:
		return v == "true" || v == "false"
	}
	return false
}

// typesOf lists a record's fields with their types, for messages.
func typesOf(r pipeline.Record) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Fields)) {
		t := string(r.Types[k])
		if t == "" {
			t = "text"
		}
		parts = append(parts, k+" "+t)
	}
	return orNone(strings.Join(parts, ", "))
}

// templateKeyMessage says which name a template reads that is not
// there, the nearest one that is, and what may be read at that place.
func templateKeyMessage(k *stages.TemplateKeyError, earlier []string, outputs map[string][]string, fields []string) string {
	msg := fmt.Sprintf("the template reads {{%s}}: there is no %q", k.Chain, k.Key)
	path, ok := k.Path()
	var valid []string
	var what string
	switch {
	case !ok:
	case len(path) == 0:
		valid, what = stages.PromptDataKeys, "the template sees .ID, .Text, .Fields.NAME, .Labels and .Out.STAGE.FIELD"
	case len(path) == 1 && path[0] == "Out":
		valid, what = earlier, "the stages before this one: "+orNone(strings.Join(earlier, ", "))
	case len(path) == 2 && path[0] == "Out":
		valid = outputs[path[1]]
		what = fmt.Sprintf("stage %s's output has: %s", path[1], strings.Join(valid, ", "))
	case len(path) == 1 && path[0] == "Fields":
		valid = fields
		what = fmt.Sprintf("no input record has it; the input's fields: %s (for a field some records lack, write {{index .Fields %q}})", orNone(strings.Join(fields, ", ")), k.Key)
	}
	if len(valid) > 0 {
		msg += didYouMeanFold(k.Key, valid)
	}
	if what != "" {
		msg += ": " + what
	}
	return msg + "; nothing was sent"
}

// didYouMeanFold is didYouMean ignoring case: {{.text}} for {{.Text}}.
func didYouMeanFold(got string, valid []string) string {
	low := make([]string, len(valid))
	for i, v := range valid {
		low[i] = strings.ToLower(v)
	}
	s := didYouMean(got, low)
	for i, v := range low {
		if s == fmt.Sprintf(" (did you mean %q?)", v) {
			return fmt.Sprintf(" (did you mean %q?)", valid[i])
		}
	}
	return s
}
