package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Record is one input row as ingested: an id, its text and every other
// field of the row, kept verbatim so later stages (and reports) can group by
// them. Records are stored once and never rewritten, except when the same id
// arrives again with a different text.
type Record struct {
	// ID is the record's key, unique in the input.
	ID string `json:"id"`
	// Text is what the stages process.
	Text string `json:"text"`
	// Fields holds every other field of the row, by name.
	Fields map[string]string `json:"fields,omitempty"`
	// Line is the 1-based line (JSONL) or row (CSV) the record came from in
	// its input file, kept so messages can point back at the source.
	Line int `json:"line,omitempty"`
}

// TextHash returns the content hash that decides whether a re-ingested id is
// unchanged (skipped) or edited (re-enters at the first stage).
func (r Record) TextHash() string {
	sum := sha256.Sum256([]byte(r.Text))
	return hex.EncodeToString(sum[:16])
}

// Item is what a Stage processes: the original record plus the outputs of
// the stages before this one, keyed by stage name. Prev holds the output of
// the immediately preceding stage (nil for the first stage).
type Item struct {
	Record
	// Prev is the preceding stage's output (nil at the first stage).
	Prev json.RawMessage
	// Outputs holds the earlier stages' outputs, by stage name.
	Outputs map[string]json.RawMessage
}

// Usage counts the tokens one stage call was billed for. Zero for stages
// that do not call a paid API.
type Usage struct {
	// PromptTokens is the input tokens.
	PromptTokens int64 `json:"prompt_tokens,omitempty"`
	// CandidateTokens is the output tokens, thinking included.
	CandidateTokens int64 `json:"candidate_tokens,omitempty"`
	// TotalTokens is the total the API reported.
	TotalTokens int64 `json:"total_tokens,omitempty"`
}

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:    u.PromptTokens + v.PromptTokens,
		CandidateTokens: u.CandidateTokens + v.CandidateTokens,
		TotalTokens:     u.TotalTokens + v.TotalTokens,
	}
}

// Result is a stage's successful output for one item.
type Result struct {
	// Output is the stage's output as a JSON object. It is stored in
	// out/<stage> and handed to the next stage as Item.Prev.
	Output json.RawMessage
	// Usage is what the call that produced Output was billed.
	Usage Usage
}

// Stage is one step of the pipeline.
//
// Process must be safe for concurrent use: the runner calls it from many
// workers at once. It must not retry on its own; the runner owns retries and
// decides what each error class means (see ClassOf). An implementation
// that calls a paid API should report each call's usage in Result.Usage.
type Stage interface {
	// Name is the stage's name: its queue, output and dead-letter keys.
	Name() string
	// Process turns one item into an output, or an error that ClassOf
	// classifies.
	Process(ctx context.Context, it Item) (Result, error)
}
