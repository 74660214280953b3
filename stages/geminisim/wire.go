// This file holds the generateContent wire shapes the simulator reads and
// writes: the request fields it uses and the answer it builds.

package geminisim

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Request bodies: only the fields the simulator reads; others are ignored.
type (
	genRequest struct {
		Contents          []content  `json:"contents"`
		SystemInstruction *content   `json:"systemInstruction"`
		GenerationConfig  *genConfig `json:"generationConfig"`
		// ServiceTier is genai's GenerateContentConfig.ServiceTier, which
		// the SDK moves to the top of the request body.
		ServiceTier string `json:"serviceTier"`
		// GenerateContentRequest is countTokens' alternative to Contents.
		GenerateContentRequest *genRequest `json:"generateContentRequest"`
	}
	content struct {
		Role  string `json:"role"`
		Parts []struct {
			Text string `json:"text"`
		} `json:"parts"`
	}
	genConfig struct {
		MaxOutputTokens    int             `json:"maxOutputTokens"`
		ResponseSchema     json.RawMessage `json:"responseSchema"`
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
	}
)

// userText joins the text of the user turns' parts with "\n".
func (q *genRequest) userText() string {
	var texts []string
	for _, c := range q.Contents {
		if c.Role != "" && c.Role != "user" {
			continue
		}
		for _, p := range c.Parts {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// promptTokens estimates the input tokens of contents and system instruction.
func (q *genRequest) promptTokens() int {
	runes := 0
	add := func(c *content) {
		for _, p := range c.Parts {
			runes += utf8.RuneCountInString(p.Text)
		}
	}
	for i := range q.Contents {
		add(&q.Contents[i])
	}
	if q.SystemInstruction != nil {
		add(q.SystemInstruction)
	}
	return estimateTokens(runes)
}

// schema reads the label enum and the answer's property names from the
// response schema (responseSchema or responseJsonSchema).
func (q *genRequest) schema() (labels []string, props map[string]bool) {
	if q.GenerationConfig == nil {
		return nil, nil
	}
	raw := q.GenerationConfig.ResponseSchema
	if len(raw) == 0 || string(raw) == "null" {
		raw = q.GenerationConfig.ResponseJSONSchema
	}
	var sch struct {
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &sch) != nil {
		return nil, nil
	}
	for _, v := range sch.Properties["label"].Enum {
		if s, ok := v.(string); ok {
			labels = append(labels, s)
		}
	}
	props = make(map[string]bool)
	for name := range sch.Properties {
		props[name] = true
	}
	return labels, props
}

// answerJSON is the model's JSON answer for a user text: label, confidence
// and reason, restricted to those the schema names (all three when it names
// none of them).
func answerJSON(user string, labels []string, props map[string]bool) string {
	label, kw := classify(user, labels)
	if !props["label"] && !props["confidence"] && !props["reason"] {
		props = map[string]bool{"label": true, "confidence": true, "reason": true}
	}
	var a struct {
		Label      string  `json:"label,omitempty"`
		Confidence float64 `json:"confidence,omitempty"`
		Reason     string  `json:"reason,omitempty"`
	}
	if props["label"] {
		a.Label = label
	}
	if props["confidence"] {
		a.Confidence = confidence(user)
	}
	if props["reason"] {
		a.Reason = reason(label, kw)
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// safetyRatings are the ratings sent with a block; blocked marks the one
// that tripped.
func safetyRatings(blocked bool) []map[string]any {
	return []map[string]any{
		{"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "probability": "NEGLIGIBLE"},
		{"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE"},
		{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"},
		{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": blocked},
	}
}

// respond writes the answer of an admitted call.
func (s *Server) respond(w http.ResponseWriter, c *call) {
	switch c.outcome {
	case OutcomeErr500:
		writeError(w, http.StatusInternalServerError, "INTERNAL",
			"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting")
		return
	case OutcomeErr503:
		writeOverloaded(w)
		return
	}
	resp := map[string]any{
		"modelVersion": c.model + "-sim",
		"responseId":   s.responseID(c),
	}
	usage := map[string]any{"promptTokenCount": c.promptTokens}
	if c.cachedTokens > 0 {
		usage["cachedContentTokenCount"] = c.cachedTokens
	}
	if c.answerTokens > 0 {
		usage["candidatesTokenCount"] = c.answerTokens
	}
	usage["totalTokenCount"] = c.promptTokens + c.answerTokens
	resp["usageMetadata"] = usage
	cand := map[string]any{"index": 0}
	switch c.outcome {
	case OutcomeBlockPrompt:
		resp["promptFeedback"] = map[string]any{"blockReason": "SAFETY", "safetyRatings": safetyRatings(true)}
	case OutcomeBlockCandidate:
		cand["finishReason"] = "SAFETY"
		cand["safetyRatings"] = safetyRatings(true)
	default:
		cand["content"] = map[string]any{"role": "model", "parts": []map[string]any{{"text": c.answer}}}
		cand["finishReason"] = "STOP"
		if c.outcome == OutcomeMaxTokens {
			cand["finishReason"] = "MAX_TOKENS"
		}
	}
	if c.outcome != OutcomeBlockPrompt {
		resp["candidates"] = []any{cand}
	}
	body, _ := json.Marshal(resp)
	if c.outcome == OutcomeMalformed {
		body = body[:len(body)/2]
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.Header().Set(TierHeader, string(c.served))
	w.WriteHeader(http.StatusOK)
	w.Write(body) //nolint:errcheck // the client may be gone
}
