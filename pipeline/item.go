package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
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
	// Fields holds every other field of the row, by name, as its text
	// (a JSON number as written, so a prompt shows it as the input did).
	Fields map[string]string `json:"fields,omitempty"`
	// Types names the fields whose text is a typed value (FieldNumber,
	// FieldBool), for conditions that compare them; a field not in it is
	// a string. Records stored before Types existed have none: their
	// fields stay strings. Not part of ContentHash, so those records still
	// read as unchanged when the same input comes again.
	Types map[string]FieldType `json:"types,omitempty"`
	// Line is the 1-based line (JSONL) or row (CSV) the record came from in
	// its input file, kept so messages can point back at the source.
	Line int `json:"line,omitempty"`
}

// FieldType is the type of a field whose text is not a string.
type FieldType string

// Field types a Record can record.
const (
	// FieldNumber is a JSON number, or a CSV column all of whose values
	// are numbers.
	FieldNumber FieldType = "number"
	// FieldBool is a JSON true or false.
	FieldBool FieldType = "bool"
)

// ContentHash covers everything a stage or the aggregate can read of a
// record: its text and every field (not Line, which only says where the
// record came from). Field names and values are length-prefixed, in
// sorted order, so no two records share a hash by concatenation. Stores
// keep it to tell an unchanged re-ingested record from an edited one;
// every store must use this one, so a pipeline copied between stores
// keeps telling them apart.
func (r Record) ContentHash() string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	put := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	put(r.Text)
	for _, k := range slices.Sorted(maps.Keys(r.Fields)) {
		put(k)
		put(r.Fields[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ChangedFields names what differs between two versions of a record:
// TextField for the text, and each field added, removed or changed.
func ChangedFields(old, cur Record) []string {
	var out []string
	if old.Text != cur.Text {
		out = append(out, TextField)
	}
	for k, v := range cur.Fields {
		if ov, ok := old.Fields[k]; !ok || ov != v {
			out = append(out, k)
		}
	}
	for k := range old.Fields {
		if _, ok := cur.Fields[k]; !ok {
			out = append(out, k)
		}
	}
	return out
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
	// CachedTokens is the part of PromptTokens the API served from its
	// implicit cache (cachedContentTokenCount), billed at the cached rate.
	CachedTokens int64 `json:"cached_tokens,omitempty"`
	// Tier is the service tier that served the call (TierStandard,
	// TierFlex, TierPriority, as the API's x-gemini-service-tier header
	// says); "" is standard.
	Tier string `json:"tier,omitempty"`
}

// Service tiers as Usage.Tier names them.
const (
	TierStandard = "standard"
	TierFlex     = "flex"
	TierPriority = "priority"
)

// tierRank orders tiers by price: flex, standard ("" too), priority.
func tierRank(tier string) int {
	switch tier {
	case TierFlex:
		return 0
	case TierPriority:
		return 2
	}
	return 1
}

// Add returns u plus v. The sum keeps a tier both share (a zero usage
// shares any); calls served by different tiers (a repair served at another
// tier than the first call) sum at the dearer one, so the sum is never
// priced below what was billed and a budget settled on it holds. Price
// mixed calls one by one where the exact cost matters.
func (u Usage) Add(v Usage) Usage {
	tier := u.Tier
	switch {
	case u == (Usage{}):
		tier = v.Tier
	case v == (Usage{}), u.Tier == v.Tier:
	case tierRank(v.Tier) > tierRank(u.Tier):
		tier = v.Tier
	}
	if tier == TierStandard {
		tier = ""
	}
	return Usage{
		PromptTokens:    u.PromptTokens + v.PromptTokens,
		CandidateTokens: u.CandidateTokens + v.CandidateTokens,
		TotalTokens:     u.TotalTokens + v.TotalTokens,
		CachedTokens:    u.CachedTokens + v.CachedTokens,
		Tier:            tier,
	}
}

// Result is a stage's successful output for one item.
type Result struct {
	// Output is the stage's output as a JSON object. It is stored in
	// out/<stage> and handed to the next stage as Item.Prev.
	Output json.RawMessage
	// Usage is what the call that produced Output was billed.
	Usage Usage
	// Calls is how many requests Process sent for this result when it
	// sent more than one (Classify and LLM ask once more after a cut-off
	// or off-schema answer), and BilledCalls how many of them were
	// billed: the runner counts each in StageStats.Calls and Paid. Zero
	// Calls means the one request, billed when Usage is not zero.
	Calls, BilledCalls int
	// PerCall is each request's usage when Process sent more than one
	// (Usage is their sum): each is priced at the tier that served it,
	// as a repair call may be served by another tier than the first.
	// Nil means Usage is priced as one call.
	PerCall []Usage
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
