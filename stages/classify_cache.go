package stages

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var (
	_ pipeline.Cacheable = (*Classify)(nil)
	_ pipeline.Estimator = (*Classify)(nil)
	_ pipeline.TierAsker = (*Classify)(nil)
)

// cacheKeyVersion changes when the key's recipe changes, so answers
// cached under an older recipe are never mistaken for this one's.
const cacheKeyVersion = "classify-key/1"

// CacheKey names everything that determines the answer to it: the model,
// the stage's configuration fingerprint, and the first request exactly as
// it is sent (system instruction, contents, response schema and
// generation config: temperature 0, output and thinking budgets). Two
// items with the same key get the same answer, so the runner pays for it
// once. The item's id is part of the key only if the prompt template uses
// it. An item Process would refuse (empty text, a template error) has no
// key.
func (c *Classify) CacheKey(it pipeline.Item) (string, error) {
	prompt, err := c.render(it)
	if err != nil {
		return "", err
	}
	cfg := c.requestConfig(c.firstRequest())
	// The key covers what reaches the model, not how it is sent (the
	// per-call headers and timeout).
	req := struct {
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
		Model: c.model, Fingerprint: c.Fingerprint(), Contents: genai.Text(prompt),
		SystemInstruction: cfg.SystemInstruction, Temperature: cfg.Temperature, MaxOutputTokens: cfg.MaxOutputTokens,
		ResponseMIMEType: cfg.ResponseMIMEType, ResponseSchema: cfg.ResponseSchema, ThinkingConfig: cfg.ThinkingConfig,
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("classify: cache key of item %s: %w", itemRef(it), err)
	}
	sum := sha256.Sum256(append([]byte(cacheKeyVersion+"\x00"), body...))
	return hex.EncodeToString(sum[:]), nil
}

// errNothingToClassify is CacheKey's refusal of an item with no text.
var errNothingToClassify = errors.New("classify: empty text")

// render is the prompt Process sends for it.
func (c *Classify) render(it pipeline.Item) (string, error) {
	text := classifyInput(it)
	if strings.TrimSpace(text) == "" {
		return "", errNothingToClassify
	}
	var prompt bytes.Buffer
	if err := c.prompt.Execute(&prompt, PromptData{ID: it.ID, Text: text, Fields: it.Fields, Labels: c.labels}); err != nil {
		return "", err
	}
	return prompt.String(), nil
}

// EstimateInput is the input tokens the first request for it will be
// billed, estimated as a quarter of the runes of the system instruction
// and the prompt (Gemini's tokenizers average about four characters per
// token on English text; the runner scales the estimate by what calls
// were actually billed).
func (c *Classify) EstimateInput(it pipeline.Item) int64 {
	prompt, err := c.render(it)
	if err != nil {
		prompt = classifyInput(it)
	}
	return estimateTokens(c.system, prompt)
}

// estimateTokens is a request's input tokens estimated from its system
// instruction and prompt: a quarter of their runes, rounded up, at least 1.
func estimateTokens(system, prompt string) int64 {
	runes := utf8.RuneCountInString(system) + utf8.RuneCountInString(prompt)
	return int64(max(1, (runes+3)/4))
}

// MaxOutputTokens is the output budget of the first request: the most
// one answer can be billed before any has shown its real size.
func (c *Classify) MaxOutputTokens() int64 { return int64(c.maxOutputTokens) }

// AskedTier is the service tier the calls ask for: a budget reserves a
// priority call at the priority price.
func (c *Classify) AskedTier() string {
	if c.tiers == nil {
		return TierStandard
	}
	return c.tiers.tier
}
