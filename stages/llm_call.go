// This file sends an LLM stage's calls for one item: the first request,
// and the one repair call Process makes when an answer is cut off or off
// the schema (at temperature 0, asking the same request again gets the
// same answer, so the runner's retries would pay for it again and again).

package stages

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// repairKind says why an answer earns one more call. Its values are stored
// in an output's "repair" field.
type repairKind string

const (
	// repairCutOff: finishReason MAX_TOKENS, the JSON is cut off.
	repairCutOff repairKind = "cut_off"
	// repairOffSchema: the text is not the JSON object the schema asks
	// for (not JSON, a field missing, a label outside the set, a value
	// outside its range).
	repairOffSchema repairKind = "off_schema"
)

// request is what varies between the calls Process makes for one item.
type request struct {
	// maxOutputTokens is the answer budget, thinking included.
	maxOutputTokens int32
	// repairNote is appended to the system instruction; "" on the first
	// call.
	repairNote string
	// tier is the call's service tier and timeout (zero: standard, the
	// stage's timeout).
	tier tierCall
}

// firstRequest is the request every item starts with.
func (l *LLM) firstRequest() request {
	return request{maxOutputTokens: l.maxOutputTokens}
}

// answer asks for prompt's answer once, and once more after a cut-off or
// off-schema answer with twice the budget and a note saying what was
// wrong (see repairRequest). If that answer is unusable the same way, the
// item is dead-lettered: the error is pipeline.Permanent. The Result's
// Usage is the sum of both calls, and a repaired output says so in its
// "repair" field.
func (l *LLM) answer(ctx context.Context, id, prompt string) (pipeline.Result, error) {
	first := l.firstRequest()
	out, usage, err := l.ask(ctx, id, prompt, first)
	var bad *stageError
	if err == nil || !errors.As(err, &bad) || bad.repair == "" {
		return l.encode(out, usage, "", err)
	}
	second := l.repairRequest(first, bad)
	out, usage2, err := l.ask(ctx, id, prompt, second)
	perCall := []pipeline.Usage{usage, usage2}
	usage = usage.Add(usage2)
	var (
		again *stageError
		res   pipeline.Result
	)
	if errors.As(err, &again) && again.repair != "" {
		res, err = pipeline.Result{Usage: usage}, pipeline.Permanent(l.repairFailed(first, second, bad, again))
	} else {
		// Answered, or the repair call failed some other way (a 503, a
		// quota, a block): its class decides; a retry starts over.
		res, err = l.encode(out, usage, bad.repair, err)
	}
	// Two requests, each counted in the run's calls; the first answer
	// was billed (it was read), the repair's when it says so.
	res.Calls, res.BilledCalls = 2, 1
	if usage2 != (pipeline.Usage{}) {
		res.BilledCalls = 2
	}
	// Each priced at the tier that served it: a repair may be served by
	// another tier than the first call.
	res.PerCall = perCall
	return res, err
}

// repairRequest is the one repair call after first's answer failed as
// bad says: twice the output budget (the answer, or thinking, may simply
// need more) and an instruction saying what was wrong. The contents stay
// the same, so the request still reads as this item's.
func (l *LLM) repairRequest(first request, bad *stageError) request {
	return request{maxOutputTokens: int32(min(2*int64(first.maxOutputTokens), math.MaxInt32)), repairNote: l.preset.repairNote(l, bad)}
}

// schemaRepairNote is a job-file stage's note to the repair call.
func (l *LLM) schemaRepairNote(bad *stageError) string {
	return fmt.Sprintf("Your previous answer was unusable (%s). Answer with only the JSON object the schema asks for, complete and short.", bad.problem)
}

// repairFailed explains an item whose answer was unusable on the first
// call and again on the repair call: asking again would pay for the same
// answer, so it goes to the dead letters with what a person can change.
func (l *LLM) repairFailed(first, second request, bad, again *stageError) error {
	return l.preset.repairFailed(l, first, second, bad, again)
}

// schemaRepairFailed is a job-file stage's dead letter (see repairFailed).
func (l *LLM) schemaRepairFailed(_, _ request, bad, again *stageError) error {
	return l.errs.outputBudget(again, "the answer was unusable (%s), and again when asked once more (%s): asking again gives the same answer; check the prompt and the output schema, or raise %s",
		bad.problem, again.problem, MaxOutputTokensWords)
}

// ask sends one request made as req for item id and reads its answer.
func (l *LLM) ask(ctx context.Context, id, prompt string, req request) (any, pipeline.Usage, error) {
	var status atomic.Int32
	req.tier = l.tiers.next(id, l.errs.timeout)
	resp, err := l.generate(context.WithValue(ctx, statusKey{}, &status), id, prompt, req)
	out, usage, err := l.decode(resp, withHTTPStatus(err, int(status.Load())), req)
	return out, l.tiers.served(id, resp, req.tier, usage, err), l.tiers.refused(ctx, id, req.tier, err)
}

// itemHeader names the item a call is for. The API ignores it; the Gemini
// simulator keys its per-item accounting by it (geminisim.ItemHeader), so
// two items with the same text are not counted as one item paid twice.
// The id is query-escaped: a header value cannot hold every byte an id can.
const itemHeader = "X-Sawtooth-Item"

// generate sends one request for item id, named in the item header as
// the preset says ("<stage>/<id>"), so each stage's call for an item is
// its own item to the simulator's accounting. A malformed
// 200 body can make the SDK panic (its response converter asserts types
// unchecked), which would take the whole run down with it: it becomes a
// transient error instead.
func (l *LLM) generate(ctx context.Context, id, prompt string, req request) (resp *genai.GenerateContentResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("%w: %v", errSDKPanic, p)
		}
	}()
	cfg := l.requestConfig(req)
	cfg.HTTPOptions.Headers.Set(itemHeader, url.QueryEscape(l.preset.itemName(l.name, id)))
	return l.client.Models.GenerateContent(ctx, l.model, genai.Text(prompt), cfg)
}

// responseSchema is the schema sent with every request: the stage's own,
// or {label, confidence, reason} with label from the label set.
func (l *LLM) responseSchema() *genai.Schema {
	if l.schema != nil {
		return l.schema
	}
	return l.labelSchema
}

// labelSchema is a label stage's response schema: {label, confidence,
// reason} with label one of labels.
func labelSchema(labels []string) *genai.Schema {
	return &genai.Schema{
		Type: genai.TypeObject,
		Properties: map[string]*genai.Schema{
			"label":      {Type: genai.TypeString, Enum: slices.Clone(labels)},
			"confidence": {Type: genai.TypeNumber, Minimum: genai.Ptr(0.0), Maximum: genai.Ptr(1.0)},
			"reason":     {Type: genai.TypeString},
		},
		Required:         []string{"label", "confidence", "reason"},
		PropertyOrdering: []string{"label", "confidence", "reason"},
	}
}

// requestConfig builds a fresh configuration for one call: GenerateContent
// writes into it (headers, the system instruction's role), so it must
// never be shared between goroutines.
func (l *LLM) requestConfig(req request) *genai.GenerateContentConfig {
	timeout := l.errs.timeout
	if req.tier.timeout > 0 {
		timeout = req.tier.timeout
	}
	system := l.system
	if req.repairNote != "" {
		system += "\n\n" + req.repairNote
	}
	cfg := &genai.GenerateContentConfig{
		HTTPOptions:           &genai.HTTPOptions{Headers: http.Header{}, Timeout: &timeout},
		SystemInstruction:     &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: system}}},
		Temperature:           genai.Ptr[float32](0),
		MaxOutputTokens:       req.maxOutputTokens,
		ResponseMIMEType:      "application/json",
		ResponseSchema:        l.responseSchema(),
		AutomaticContinuation: genai.Ptr(false),
		ServiceTier:           req.tier.ask,
	}
	if l.thinkingBudget != nil {
		cfg.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: genai.Ptr(*l.thinkingBudget)}
	}
	return cfg
}
