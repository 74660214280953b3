// This file turns a generateContent response into an LLM stage's output:
// blocks and finish reasons, then the structured answer checked against the
// schema (and the label set).

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
func (l *LLM) Decode(resp *genai.GenerateContentResponse, callErr error) (pipeline.Result, error) {
	out, usage, err := l.decode(resp, callErr, l.firstRequest())
	return l.encode(out, usage, "", err)
}

// decode is Decode for a call made as req: it returns the answer and what
// the call was billed, or a classified error (a *stageError with a repair
// kind for a cut-off or off-schema answer, transient by itself).
func (l *LLM) decode(resp *genai.GenerateContentResponse, callErr error, req request) (any, pipeline.Usage, error) {
	if callErr != nil {
		return nil, pipeline.Usage{}, l.errs.callError(callErr)
	}
	if resp == nil {
		return nil, pipeline.Usage{}, l.errs.unusable("the API returned an empty response")
	}
	out, err := l.check(resp, req)
	return out, usageOf(resp.UsageMetadata), err
}

// encode stores out, billed usage, as the stage's output; repair is why a
// second call was needed ("" when the first answer was used). A label
// answer records its model and usage beside the label.
func (l *LLM) encode(out any, usage pipeline.Usage, repair repairKind, err error) (pipeline.Result, error) {
	res := pipeline.Result{Usage: usage}
	if err != nil {
		return res, err
	}
	b, err := json.Marshal(l.preset.record(l, out, usage, repair))
	if err != nil {
		return res, fmt.Errorf("%s: encode output: %w", l.name, err)
	}
	res.Output = b
	return res, nil
}

// recordObject is a job-file stage's output for out: a schema's object as
// answered; a label answer as {label, confidence, reason} with its model
// and usage, and why a second call was needed.
func (l *LLM) recordObject(out any, usage pipeline.Usage, repair repairKind) any {
	o, ok := out.(map[string]any)
	if !ok || l.labels == nil {
		return out
	}
	num, _ := o["confidence"].(json.Number) // a number: check matched the schema
	conf, _ := num.Float64()
	reason, _ := o["reason"].(string)
	lo := map[string]any{"label": o["label"], "confidence": conf, "reason": strings.TrimSpace(reason), "model": l.model, "usage": usage}
	if repair != "" {
		lo["repair"] = repair
	}
	return lo
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

// check reads the answer to a call made as req: blocks and finish reasons,
// then the JSON object as the preset reads it.
func (l *LLM) check(resp *genai.GenerateContentResponse, req request) (any, error) {
	e := l.errs
	if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" {
		detail := ""
		if pf.BlockReasonMessage != "" {
			detail = ": " + e.short(pf.BlockReasonMessage, 200)
		}
		return nil, verdict(e.errorf(nil, "blocked by the model's safety filter (promptFeedback.blockReason=%s%s): %s", pf.BlockReason, detail, blockHint))
	}
	if len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return nil, e.unusable("the model returned no candidates and no block reason")
	}
	cand := resp.Candidates[0]
	switch fr := cand.FinishReason; {
	case fr == "" || fr == genai.FinishReasonStop || fr == genai.FinishReasonUnspecified:
	case fr == genai.FinishReasonMaxTokens:
		return nil, e.repairable(repairCutOff, fmt.Sprintf("cut off at %d output tokens", req.maxOutputTokens),
			"the answer was cut off at %d output tokens (finishReason=MAX_TOKENS): "+l.preset.cutOffHint, req.maxOutputTokens)
	case blockedFinish[fr] != "":
		return nil, verdict(e.errorf(nil, "%s (finishReason=%s): %s", blockedFinish[fr], fr, blockHint))
	default:
		return nil, e.unusable("the model stopped early (finishReason=%s)", fr)
	}
	var text strings.Builder
	if cand.Content != nil {
		for _, p := range cand.Content.Parts {
			if p != nil && !p.Thought {
				text.WriteString(p.Text)
			}
		}
	}
	return l.preset.read(l, strings.TrimSpace(text.String()), resp.ModelVersion)
}

// readObject reads raw as the JSON object the response schema asks for
// (numbers as json.Number); a label is matched to the label set ignoring
// case and surrounding space.
func (l *LLM) readObject(raw string) (map[string]any, error) {
	e := l.errs
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil || out == nil {
		detail := fmt.Sprintf("not a JSON object: %q", e.short(raw, 120))
		return nil, e.repairable(repairOffSchema, detail, "model output did not match the schema: %s", detail)
	}
	if l.labels != nil {
		label, _ := out["label"].(string)
		if want, ok := l.canonicalLabel(label); ok {
			out["label"] = want
		}
	}
	if p := matchSchema(l.responseSchema(), out, "answer"); p != "" {
		return nil, e.repairable(repairOffSchema, p, "model output did not match the schema: %s", e.short(p, 200))
	}
	return out, nil
}

// canonicalLabel matches s against the label set, ignoring case and
// surrounding space.
func (l *LLM) canonicalLabel(s string) (string, bool) {
	s = strings.TrimSpace(s)
	for _, want := range l.labels {
		if strings.EqualFold(s, want) {
			return want, true
		}
	}
	return "", false
}
