package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// Each stage's definition in the DB carries the settings that decide its
// output (StageDef.Config), keyed by flag name, so that a later command
// can keep them when their flags are not given, and a refused
// configuration change can be shown as a diff. The aggregate's are the
// stages.Aggregate JSON, as verify reads them.

// sanitizeSettings are what decides the sanitize stage's output.
type sanitizeSettings struct {
	MaxChars int    `json:"max-chars"`
	Emoji    string `json:"emoji"`
}

// classifySettings are what decides the classify stage's output. Prompt
// is the template text itself (empty: the built-in one), so a re-run
// without --prompt-file pays for the same prompt as before even if the
// file changed.
type classifySettings struct {
	Model           string   `json:"model"`
	Labels          []string `json:"labels"`
	PromptFile      string   `json:"prompt-file,omitempty"`
	Prompt          string   `json:"prompt,omitempty"`
	MaxOutputTokens int      `json:"max-output-tokens"`
}

// promptSHA is a short hash of a prompt template, for messages.
func promptSHA(prompt string) string {
	if prompt == "" {
		return "built-in"
	}
	h := sha256.Sum256([]byte(prompt))
	return "sha " + hex.EncodeToString(h[:])[:8]
}

// storedSettings reads the settings recorded with each stage, by stage
// name; a stage recorded without them (a DB from an older sawtooth) is
// absent.
func storedSettings(defs []store.StageDef) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, d := range defs {
		if len(d.Config) > 0 {
			out[d.Name] = d.Config
		}
	}
	return out
}

// keepStored fills every setting whose flag was not given from the
// settings the DB recorded, and returns the flags it filled, so that a
// resume or a re-run uses what the items were paid with instead of the
// defaults.
func (o *pipelineOptions) keepStored(stored map[string]json.RawMessage) []string {
	var kept []string
	keep := func(flag string, get func() string, apply func()) {
		if o.set[flag] {
			return
		}
		before := get()
		apply()
		if get() != before {
			kept = append(kept, flag)
		}
	}
	if raw, ok := stored["sanitize"]; ok {
		var s sanitizeSettings
		if json.Unmarshal(raw, &s) == nil && s.Emoji != "" {
			keep("max-chars", func() string { return fmt.Sprint(o.MaxChars) }, func() { o.MaxChars = s.MaxChars })
			keep("emoji", func() string { return o.Emoji }, func() { o.Emoji = s.Emoji })
		}
	}
	if raw, ok := stored["classify"]; ok {
		var s classifySettings
		if json.Unmarshal(raw, &s) == nil && s.Model != "" {
			keep("model", func() string { return o.Model }, func() { o.Model = s.Model })
			keep("labels", func() string { return strings.Join(o.Labels, ",") }, func() { o.Labels = slices.Clone(s.Labels) })
			keep("prompt-file", func() string { return o.PromptFile + "\x00" + o.prompt }, func() {
				o.PromptFile, o.prompt, o.promptKept = s.PromptFile, s.Prompt, true
			})
			keep("max-output-tokens", func() string { return fmt.Sprint(o.MaxOutputTokens) }, func() { o.MaxOutputTokens = s.MaxOutputTokens })
		}
	}
	if raw, ok := stored["aggregate"]; ok {
		var a stages.Aggregate
		if json.Unmarshal(raw, &a) == nil {
			keep("group-by", func() string { return strings.Join(o.GroupBy, ",") }, func() { o.GroupBy = slices.Clone(a.GroupBy) })
			keep("date-field", func() string { return o.DateField }, func() { o.DateField = a.DateField })
			keep("rating-field", func() string { return o.RatingField }, func() { o.RatingField = a.RatingField })
		}
	}
	return kept
}

// settingsDiff lists what differs between two recorded settings of one
// stage, one `key: old -> new` per line; nil when either is unknown.
func settingsDiff(stage string, old, cur json.RawMessage) []string {
	if len(old) == 0 || len(cur) == 0 {
		return nil
	}
	a, b := flatSettings(stage, old), flatSettings(stage, cur)
	if a == nil || b == nil {
		return nil
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, a[k], b[k]))
		}
	}
	sort.Strings(out)
	return out
}

// flatSettings is a stage's recorded settings as flag name -> printable
// value; the prompt is shown as its hash and file.
func flatSettings(stage string, raw json.RawMessage) map[string]string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	switch stage {
	case "sanitize":
		var s sanitizeSettings
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		return map[string]string{"max-chars": fmt.Sprint(s.MaxChars), "emoji": q(s.Emoji)}
	case "classify":
		var s classifySettings
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		prompt := promptSHA(s.Prompt)
		if s.PromptFile != "" {
			prompt += " (file " + s.PromptFile + ")"
		}
		return map[string]string{"model": q(s.Model), "labels": q(strings.Join(s.Labels, ",")), "prompt": prompt,
			"max-output-tokens": fmt.Sprint(s.MaxOutputTokens)}
	case "aggregate":
		var a stages.Aggregate
		if json.Unmarshal(raw, &a) != nil {
			return nil
		}
		return map[string]string{"group-by": q(strings.Join(a.GroupBy, ",")), "date-field": q(a.DateField), "rating-field": q(a.RatingField)}
	}
	return nil
}

// keepRecorded fills the settings whose flags were not given from what
// the database recorded: the stage definitions' settings, and the job a
// run from flags stored (the limiter, tier, mode, input fields...), and
// says which it kept.
func keepRecorded(o *pipelineOptions, req *drainRequest) error {
	defs, err := readDefinition(o.DB)
	if err != nil {
		return err
	}
	kept := o.keepStored(storedSettings(defs))
	var dropped []string
	oldModel := ""
	if st, err := loadStored(o.DB); err == nil && st != nil && st.Flags {
		if j, err := storedJobOf(o.DB, st); err == nil {
			k, d := o.keepStoredJob(j, &req.Input, &req.Batch)
			kept, dropped = append(kept, k...), d
			if l := classifyOf(j); l != nil {
				oldModel = l.Model
			}
		}
	}
	if len(kept) > 0 {
		// retry and rerun keep each setting whose flag is not given; run
		// keeps them only when given none (see runOptions).
		how := "give the flag to change one"
		if req.RerunFrom == "" && req.RetryStage == "" {
			how = "a run given any setting's flag keeps none of them: it takes the flags given and the defaults for the rest"
		}
		fmt.Fprintf(req.ErrOut, "keeping the settings %s recorded for --%s (%s)\n", o.DB, strings.Join(kept, ", --"), how)
	}
	if len(dropped) > 0 {
		fmt.Fprintf(req.ErrOut, "--model %s: not keeping --%s, recorded for %s: %s's list price and the default quota apply (give the flags to set them for %s)\n",
			o.Model, strings.Join(dropped, ", --"), oldModel, o.Model, o.Model)
	}
	return nil
}
