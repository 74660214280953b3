package job

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// checkSchema refuses a schema file Gemini's responseSchema cannot
// express.
func checkSchema(j *Job, name string) error {
	b, err := j.ReadFile(name)
	if err != nil {
		return err
	}
	_, err = stages.ParseResponseSchema(b)
	return err
}

// checkWhen compiles a condition against the stages before it.
func checkWhen(src string, earlier []string) error {
	_, err := stages.CompileWhen(src, earlier)
	return err
}

// Files returns the content hash of every file the job's stages name
// (prompt, system and schema files), by the path as written.
func (j *Job) Files() (map[string]string, error) {
	out := map[string]string{}
	for _, l := range j.LLMStages() {
		for _, f := range []string{l.PromptFile, l.SystemFile, l.Output.SchemaFile} {
			if f == "" {
				continue
			}
			b, err := j.ReadFile(f)
			if err != nil {
				return nil, err
			}
			out[f] = hashOf(b)
		}
	}
	return out, nil
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// StageDefs is the stage list as the store records it: each stage's
// name, what it reads, its configuration (JSON) and a fingerprint of
// what changes its answers (the configuration without the limiter, mode
// and attempt budget, plus the content of the files it names). files is
// j.Files(). A caller that builds the stages may replace a fingerprint
// with the stage's own (the CLI does, so that a job equivalent to a run
// from flags has that run's fingerprints).
func (j *Job) StageDefs(files map[string]string) []pipeline.StageDef {
	defs := make([]pipeline.StageDef, 0, len(j.Stages))
	for _, s := range j.Stages {
		cfg, _ := json.Marshal(s)
		d := pipeline.StageDef{Name: s.Name(), Config: cfg}
		h := sha256.New()
		h.Write([]byte(s.Kind()))
		switch {
		case s.Sanitize != nil:
			d.Reads = []string{pipeline.TextField}
			b, _ := json.Marshal(s.Sanitize)
			h.Write(b)
		case s.LLM != nil:
			answers := *s.LLM
			answers.Limiter, answers.Mode, answers.MaxAttempts = Limiter{}, "", 0
			b, _ := json.Marshal(answers)
			h.Write(b)
			for _, f := range []string{s.LLM.PromptFile, s.LLM.SystemFile, s.LLM.Output.SchemaFile} {
				h.Write([]byte{0})
				h.Write([]byte(files[f]))
			}
		case s.Aggregate != nil:
			a := s.Aggregate
			reads := []string{orDefault(a.Rating, "rating"), orDefault(a.Date, "date"), "month"}
			if a.GroupBy == nil {
				reads = append(reads, "app")
			}
			for _, g := range a.GroupBy {
				if !strings.EqualFold(g, "month") {
					reads = append(reads, g)
				}
			}
			d.Reads = reads
			b, _ := json.Marshal(a)
			h.Write(b)
		}
		d.Fingerprint = hex.EncodeToString(h.Sum(nil)[:8])
		defs = append(defs, d)
	}
	return defs
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
