package stages

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/internal/jsonquote"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Cacheable = (*LLM)(nil)

// cacheKeyVersion changes when the key's recipe changes, so answers
// cached under an older recipe are never mistaken for this one's.
const cacheKeyVersion = "classify-key/1"

// CacheKey names everything that determines the stage's answer for it:
// the stage, the model, the stage's fingerprint (its condition included)
// and the first request exactly as it is sent (system instruction,
// rendered prompt with the earlier outputs it reads, response schema,
// generation config: temperature 0, output and thinking budgets), not how
// it is sent (headers, timeout). Two items, or two runs, asking the same
// question share one paid answer: a stage re-run because an earlier one
// changed pays nothing for the items whose prompt it did not change. The
// item's id is part of the key only if the prompt template uses it. An
// item Process would refuse (a template error, an empty prompt) has no
// key. A skipped item never gets here (see Skip). The preset says how the
// key names the stage.
//
// The key hashes the JSON of keyRequest; only its contents vary by item,
// so the rest is marshalled once (see keyParts) and the contents written
// by hand, byte for byte as encoding/json writes them: marshalling the
// SDK's request types for every item cost a night 5% of its CPU.
func (l *LLM) CacheKey(it pipeline.Item) (string, error) {
	prompt, err := l.render(it)
	if err != nil {
		return "", err
	}
	head, tail, err := l.keyParts()
	if err != nil {
		return "", fmt.Errorf("%s: cache key of item %s: %w", l.name, itemRef(it), err)
	}
	body := make([]byte, 0, len(head)+len(tail)+len(prompt)+len(contentsHead)+len(contentsTail)+16)
	body = append(body, head...)
	if prompt == "" {
		// encoding/json leaves an empty text out (omitempty); no prompt
		// rendered empty is sent, but the key must still be the recipe's.
		c, err := json.Marshal(genai.Text(prompt))
		if err != nil {
			return "", fmt.Errorf("%s: cache key of item %s: %w", l.name, itemRef(it), err)
		}
		body = append(body, c...)
	} else {
		body = append(body, contentsHead...)
		body = jsonquote.Append(body, prompt)
		body = append(body, contentsTail...)
	}
	body = append(body, tail...)
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// contentsHead and contentsTail surround the JSON string of the prompt in
// the JSON of genai.Text(prompt) (a prompt that is not empty).
const (
	contentsHead = `[{"parts":[{"text":`
	contentsTail = `}],"role":"user"}]`
)

// keyRequest is what a cache key hashes the JSON of, after the preset's
// prefix. Its fields and their order are the key's recipe: changing them
// changes every key, and a database would pay again for every answer it
// has cached (bump cacheKeyVersion only with a migration).
type keyRequest struct {
	Stage             string                `json:"stage,omitempty"`
	Model             string                `json:"model"`
	Fingerprint       string                `json:"fingerprint"`
	Contents          json.RawMessage       `json:"contents"`
	SystemInstruction *genai.Content        `json:"systemInstruction"`
	Temperature       *float32              `json:"temperature"`
	MaxOutputTokens   int32                 `json:"maxOutputTokens"`
	ResponseMIMEType  string                `json:"responseMimeType"`
	ResponseSchema    *genai.Schema         `json:"responseSchema"`
	ThinkingConfig    *genai.ThinkingConfig `json:"thinkingConfig"`
}

// contentsNum stands for the contents while keyParts marshals the rest:
// a JSON number, so no string value of the request holds contentsMark
// unescaped.
const (
	contentsNum  = "1234567890123"
	contentsMark = `"contents":` + contentsNum + `,`
)

// keyParts is the hashed bytes of every item's key before its contents
// (the preset's prefix included) and after them, built once: they depend
// only on the stage's configuration, which does not change once built.
func (l *LLM) keyParts() (head, tail []byte, err error) {
	l.keyOnce.Do(func() {
		cfg := l.requestConfig(l.firstRequest())
		stage, prefix := l.preset.cacheScope(l.name)
		req := keyRequest{
			Stage: stage, Model: l.model, Fingerprint: l.Fingerprint(), Contents: json.RawMessage(contentsNum),
			SystemInstruction: cfg.SystemInstruction, Temperature: cfg.Temperature, MaxOutputTokens: cfg.MaxOutputTokens,
			ResponseMIMEType: cfg.ResponseMIMEType, ResponseSchema: cfg.ResponseSchema, ThinkingConfig: cfg.ThinkingConfig,
		}
		body, err := json.Marshal(req)
		if err != nil {
			l.keyErr = err
			return
		}
		at := bytes.Index(body, []byte(contentsMark))
		if at < 0 || bytes.Count(body, []byte(contentsMark)) != 1 {
			l.keyErr = fmt.Errorf("cache key: the contents are not where the recipe puts them in %s", body)
			return
		}
		at += len(`"contents":`)
		l.keyHead = append([]byte(prefix), body[:at]...)
		l.keyTail = body[at+len(contentsNum):]
	})
	return l.keyHead, l.keyTail, l.keyErr
}

var (
	_ pipeline.Estimator = (*LLM)(nil)
	_ pipeline.TierAsker = (*LLM)(nil)
)

// EstimateInput is the input tokens the first request for it will be
// billed, estimated as a quarter of the runes of the system instruction
// and the rendered prompt, with the earlier outputs it reads (Gemini's
// tokenizers average about four characters per token on English text;
// the runner scales the estimate by what calls were actually billed).
// Without it the runner would reserve for the item's text alone, short of
// the template and the instruction, and the first calls of a run could
// cross a budget.
func (l *LLM) EstimateInput(it pipeline.Item) int64 {
	prompt, err := l.render(it)
	if err != nil {
		prompt = itemText(it)
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

// estimateTokens is a request's input tokens estimated from its system
// instruction and prompt: a quarter of their runes, rounded up, at least 1.
func estimateTokens(system, prompt string) int64 {
	runes := utf8.RuneCountInString(system) + utf8.RuneCountInString(prompt)
	return int64(max(1, (runes+3)/4))
}
