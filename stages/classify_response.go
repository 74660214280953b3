// This file turns a generateContent response into the stage's output:
// blocks and finish reasons, then the structured answer checked against the
// schema and the label set.

package stages

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Decode is the one place that turns what GenerateContent returned into a
// Result or a classified error. callErr is GenerateContent's error; resp
// its response (ignored when callErr is not nil).
//
//   - 429 or RESOURCE_EXHAUSTED: pipeline.RateLimited, with RetryInfo's
//     retryDelay and Daily when a QuotaFailure's quotaId is a per-day one.
//   - rejected key (401, 400 API_KEY_INVALID), 403, unknown model (404),
//     400 FAILED_PRECONDITION: pipeline.Fatal; they fail every item alike.
//   - 408, 499 and 5xx, timeouts, transport failures, broken bodies, a
//     body over MaxResponseBytes (MaxErrorBodyBytes for an error status),
//     no candidates, MAX_TOKENS, output that does not match the schema:
//     transient (a plain error); the runner retries within its budget.
//     (Process asks once more itself after a cut-off or off-schema answer
//     and makes a second one permanent; Decode judges one call.)
//   - other 4xx, a blocked prompt, a safety finishReason: pipeline.Permanent.
//
// A caller's canceled context comes back as a plain error wrapping it;
// the runner sees its own context is done. No message contains the API key
// or any part of it: messages are redacted before they are cut.
func (c *Classify) Decode(resp *genai.GenerateContentResponse, callErr error) (pipeline.Result, error) {
	out, usage, err := c.decode(resp, callErr, c.firstRequest())
	res := pipeline.Result{Usage: usage}
	if err != nil {
		return res, err
	}
	return c.encode(out, usage)
}

// decode is Decode for a call made as req: it returns the answer and what
// the call was billed, or a classified error (a *stageError with a repair
// kind for a cut-off or off-schema answer, transient by itself).
func (c *Classify) decode(resp *genai.GenerateContentResponse, callErr error, req request) (ClassifyOutput, pipeline.Usage, error) {
	if callErr != nil {
		return ClassifyOutput{}, pipeline.Usage{}, c.errs.callError(callErr)
	}
	if resp == nil {
		return ClassifyOutput{}, pipeline.Usage{}, c.errs.unusable("the API returned an empty response")
	}
	usage := usageOf(resp.UsageMetadata)
	out, err := c.checkResponse(resp, req)
	return out, usage, err
}

// encode stores out, billed usage, as the stage's output.
func (c *Classify) encode(out ClassifyOutput, usage pipeline.Usage) (pipeline.Result, error) {
	res := pipeline.Result{Usage: usage}
	out.Usage = usage
	b, err := json.Marshal(out)
	if err != nil {
		return res, fmt.Errorf("classify: encode output: %w", err)
	}
	res.Output = b
	return res, nil
}

func usageOf(u *genai.GenerateContentResponseUsageMetadata) pipeline.Usage {
	if u == nil {
		return pipeline.Usage{}
	}
	// Thinking tokens are billed as output.
	return pipeline.Usage{
		PromptTokens:    int64(u.PromptTokenCount),
		CandidateTokens: int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount),
		TotalTokens:     int64(u.TotalTokenCount),
		CachedTokens:    int64(u.CachedContentTokenCount),
	}
}

// blockedFinish says in words why a candidate was stopped for its content.
var blockedFinish = map[genai.FinishReason]string{
	genai.FinishReasonSafety:                 "the answer was blocked by the model's safety filter",
	genai.FinishReasonRecitation:             "the answer was stopped for reciting training data",
	genai.FinishReasonBlocklist:              "the answer contained a term on a blocklist",
	genai.FinishReasonProhibitedContent:      "the answer was stopped for prohibited content",
	genai.FinishReasonSPII:                   "the answer was stopped for sensitive personal information",
	genai.FinishReasonLanguage:               "the text is in a language the model does not support",
	genai.FinishReasonImageSafety:            "the answer was blocked by the image safety filter",
	genai.FinishReasonImageProhibitedContent: "the answer was stopped for prohibited image content",
	genai.FinishReasonImageRecitation:        "the answer was stopped for reciting an image",
}

// checkResponse reads the answer to a call made as req.
func (c *Classify) checkResponse(resp *genai.GenerateContentResponse, req request) (ClassifyOutput, error) {
	if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" {
		detail := ""
		if pf.BlockReasonMessage != "" {
			detail = ": " + c.errs.short(pf.BlockReasonMessage, 200)
		}
		return ClassifyOutput{}, verdict(c.errs.errorf(nil, "blocked by the model's safety filter (promptFeedback.blockReason=%s%s): %s", pf.BlockReason, detail, blockHint))
	}
	if len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return ClassifyOutput{}, c.errs.unusable("the model returned no candidates and no block reason")
	}
	cand := resp.Candidates[0]
	switch fr := cand.FinishReason; {
	case fr == "" || fr == genai.FinishReasonStop || fr == genai.FinishReasonUnspecified:
	case fr == genai.FinishReasonMaxTokens:
		return ClassifyOutput{}, c.errs.repairable(repairCutOff, fmt.Sprintf("cut off at %d output tokens", req.maxOutputTokens),
			"the answer was cut off at %d output tokens (finishReason=MAX_TOKENS): if this persists, raise --max-output-tokens or lower the thinking budget", req.maxOutputTokens)
	case blockedFinish[fr] != "":
		return ClassifyOutput{}, verdict(c.errs.errorf(nil, "%s (finishReason=%s): %s", blockedFinish[fr], fr, blockHint))
	default:
		return ClassifyOutput{}, c.errs.unusable("the model stopped early (finishReason=%s)", fr)
	}

	var text strings.Builder
	if cand.Content != nil {
		for _, p := range cand.Content.Parts {
			if p != nil && !p.Thought {
				text.WriteString(p.Text)
			}
		}
	}
	var ans struct {
		Label      *string  `json:"label"`
		Confidence *float64 `json:"confidence"`
		Reason     *string  `json:"reason"`
	}
	schemaErr := func(format string, args ...any) error {
		detail := fmt.Sprintf(format, args...)
		return c.errs.repairable(repairOffSchema, detail, "model output did not match the schema: %s", detail)
	}
	raw := strings.TrimSpace(text.String())
	if err := json.Unmarshal([]byte(raw), &ans); err != nil {
		return ClassifyOutput{}, schemaErr("not a JSON object (%v): %q", err, c.errs.short(raw, 120))
	}
	var missing []string
	if ans.Label == nil {
		missing = append(missing, "label")
	}
	if ans.Confidence == nil {
		missing = append(missing, "confidence")
	}
	if ans.Reason == nil {
		missing = append(missing, "reason")
	}
	if len(missing) > 0 {
		return ClassifyOutput{}, schemaErr("missing %s in %q", strings.Join(missing, ", "), c.errs.short(raw, 120))
	}
	label, ok := c.canonicalLabel(*ans.Label)
	if !ok {
		return ClassifyOutput{}, schemaErr("label %q is not one of %s", c.errs.short(*ans.Label, 60), strings.Join(c.labels, ", "))
	}
	if conf := *ans.Confidence; !(conf >= 0 && conf <= 1) {
		return ClassifyOutput{}, schemaErr("confidence %v is outside 0..1", conf)
	}
	return ClassifyOutput{
		Label:        label,
		Confidence:   *ans.Confidence,
		Reason:       strings.TrimSpace(*ans.Reason),
		Model:        c.model,
		ModelVersion: resp.ModelVersion,
	}, nil
}

// canonicalLabel matches l against the label set, ignoring case and
// surrounding space.
func (c *Classify) canonicalLabel(l string) (string, bool) {
	l = strings.TrimSpace(l)
	for _, want := range c.labels {
		if strings.EqualFold(l, want) {
			return want, true
		}
	}
	return "", false
}
