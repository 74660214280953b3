package stages

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Cacheable = (*LLM)(nil)

// CacheKey names everything that determines the stage's answer for it,
// as Classify.CacheKey does: the model, the stage's fingerprint (its
// condition included) and the first request as it is sent (system
// instruction, rendered prompt with the earlier outputs it reads,
// response schema, generation config). Two items, or two runs, asking the
// same question share one paid answer: a stage re-run because an earlier
// one changed pays nothing for the items whose prompt it did not change.
// An item Process would refuse (a template error, an empty prompt) has no
// key. A skipped item never gets here (see Skip).
func (l *LLM) CacheKey(it pipeline.Item) (string, error) {
	prompt, err := l.render(it)
	if err != nil {
		return "", err
	}
	cfg := l.requestConfig(request{maxOutputTokens: l.maxOutputTokens})
	req := struct {
		Stage             string                `json:"stage"`
		Model             string                `json:"model"`
		Fingerprint       string                `json:"fingerprint"`
		Contents          []*genai.Content      `json:"contents"`
		SystemInstruction *genai.Content        `json:"systemInstruction"`
		Temperature       *float32              `json:"temperature"`
		MaxOutputTokens   int32                 `json:"maxOutputTokens"`
		ResponseMIMEType  string                `json:"responseMimeType"`
		ResponseSchema    *genai.Schema         `json:"responseSchema"`
		ThinkingConfig    *genai.ThinkingConfig `json:"thinkingConfig"`
	}{
		Stage: l.name, Model: l.model, Fingerprint: l.Fingerprint(), Contents: genai.Text(prompt),
		SystemInstruction: cfg.SystemInstruction, Temperature: cfg.Temperature, MaxOutputTokens: cfg.MaxOutputTokens,
		ResponseMIMEType: cfg.ResponseMIMEType, ResponseSchema: cfg.ResponseSchema, ThinkingConfig: cfg.ThinkingConfig,
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("%s: cache key of item %s: %w", l.name, itemRef(it), err)
	}
	sum := sha256.Sum256(append([]byte(cacheKeyVersion+"\x00llm\x00"), body...))
	return hex.EncodeToString(sum[:]), nil
}

var (
	_ pipeline.Estimator = (*LLM)(nil)
	_ pipeline.TierAsker = (*LLM)(nil)
)

// EstimateInput is the input tokens the first request for it will be
// billed, estimated as Classify.EstimateInput does: a quarter of the runes
// of the system instruction and the rendered prompt (with the earlier
// outputs it reads). Without it the runner would reserve for the item's
// text alone, short of the template and the instruction, and the first
// calls of a run could cross a budget.
func (l *LLM) EstimateInput(it pipeline.Item) int64 {
	prompt, err := l.render(it)
	if err != nil {
		prompt = classifyInput(it)
	}
	return estimateTokens(l.system, prompt)
}

// MaxOutputTokens is the output budget of the first request (the stage's
// max_output_tokens): the most one answer can be billed before any has
// shown its real size.
func (l *LLM) MaxOutputTokens() int64 { return int64(l.maxOutputTokens) }

// AskedTier is the service tier the calls ask for: a budget reserves a
// priority call at the priority price.
func (l *LLM) AskedTier() string {
	if l.tiers == nil {
		return TierStandard
	}
	return l.tiers.tier
}
