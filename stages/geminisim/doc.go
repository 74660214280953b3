// Package geminisim is a Gemini-compatible HTTP server for tests, demos and
// benchmarks: the real google.golang.org/genai client talks to it unchanged
// (set HTTPOptions.BaseURL to the URL Start returns and APIKey to the
// configured key).
//
// It serves POST /v1beta/models/{model}:generateContent and :countTokens
// with the real API's request and response bodies, error bodies included,
// and GET /_sim/stats with its accounting (see Stats). It serves the same
// under Vertex AI's paths,
// /v1beta1/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent,
// checking no credentials and answering 429s as Vertex does, with no
// quotaId and no RetryInfo (vertex.go). A response schema other than the
// label/confidence/reason one gets a deterministic answer built from the
// schema itself (schema.go).
//
// A generateContent call goes through these steps, in order: API key (400
// API_KEY_INVALID), model (404 NOT_FOUND), JSON body (400
// INVALID_ARGUMENT), concurrency (past MaxConcurrent: 503 overloaded, or a
// bare 429 "Resource has been exhausted (e.g. check quota)." with no
// details), overload bursts (503), quota (429 RESOURCE_EXHAUSTED), then,
// once admitted, latency and the answer, which may be an injected fault.
//
// The quota serves the shapes real quota systems have (see Quota, which a
// benchmark can run on its own to compute a perfect client): RPM and TPM
// per Window counted as a sliding log, a fixed window reset at each
// boundary, or a token bucket with a burst; RPD over Day; a Schedule that
// scales RPM and TPM over time; refusals counted against the quota or not.
// Admitted calls consume quota whatever their answer, as real ones do. A
// 429 carries the real details: QuotaFailure violations (every quota
// exceeded, with or without quotaValue, or none at all as on Vertex), a
// Help link and RetryInfo.retryDelay: exact (the time until the request
// would be admitted if nothing else were), coarse (whole seconds, often
// later than needed, as Gemini's 26-59 s) or absent. Latency can have a
// heavy tail and grow with the calls in flight.
//
// Everything an answer depends on is deterministic. Tokens are estimated as
// ceil(runes/4). The label answered is Label(user text, labels), where the
// labels are the enum of the response schema's "label" property; only the
// user turns count, not the system instruction, so a client should keep its
// instructions and label list in the system instruction. Faults, jitter and
// response ids are fixed by (Config.Seed, item, call number): the item is
// the id the request names in ItemHeader, else the SHA-256 of the user
// text (see ItemHash), and the call number counts that item's earlier
// admitted calls, so a run repeats whatever the
// interleaving of items. Texts containing one of SafetyTriggers always get
// a blocked-prompt answer.
package geminisim
