// Package stages holds sawtooth's pipeline.Stage implementations:
// Sanitize, LLM stages (Classify among them) and Aggregate.
//
// Sanitize is pure: Clean repairs invalid UTF-8, normalises to NFC, drops
// control and invisible format characters, applies an emoji policy,
// collapses whitespace and truncates to a rune budget, recording what it
// changed. Text that is empty afterwards is a permanent error: there is
// nothing to classify and retrying cannot help.
//
// LLM is the one stage that calls a model: a named stage with its own
// model, prompt template (which sees the item's fields and the earlier
// stages' outputs as .Out.<stage>.<field>), and output, either a label set
// ({label, confidence, reason}) or any JSON schema that Gemini's
// responseSchema can express (ParseResponseSchema refuses the rest before
// anything runs). A When condition (expr-lang, over the earlier outputs)
// leaves items out: LLM is a pipeline.Skipper, so a skipped item costs no
// call and no limiter slot, and its output records the skip. It calls the
// Gemini API or Vertex AI (Endpoint) with google.golang.org/genai (the
// SDK's own retries and automatic continuation are off: the pipeline owns
// retries) and asks for JSON constrained by the response schema. What a
// kind of LLM stage does its own way (prompt, reading and storing the
// answer, repair notes, dead letters, item header, cache key) is its
// preset, a value the stage holds: job-file stages use one, and Classify
// is the stage with the classify preset, the stage a run from flags
// builds, labelling the sanitized text, whose request, cache key and
// stored output are those the classify stage had before it was a preset,
// so older databases resume without paying again.
//
// Every way a call can fail is mapped to a pipeline error class in one
// place, geminiErrors, whose messages name the stage: quota refusals are
// rate-limited (with the server's RetryInfo delay, and Daily when a
// per-day quota is gone), a rejected key, a forbidden project or an
// unknown model are fatal, safety blocks and other per-item 4xx are
// permanent, and 5xx, timeouts, broken or over-size bodies are transient.
// A Process call sends one request, and one more only when the answer was
// cut off (MAX_TOKENS) or did not match the schema: at temperature 0 the
// same request gets the same answer, so the stage itself asks again once
// with twice the output budget and a note saying what was wrong, and a
// second unusable answer is permanent (both calls are reported as billed).
// The Batch API asks the same first request (BatchRequest) and judges its
// answer as Decode judges an online one (DecodeBatch), for any LLM stage.
// Response bodies are capped (MaxResponseBytes). The API key, any part of
// it and anything shaped like a Google API key never appear in an error
// or an output: messages are redacted before they are cut.
//
// Permanent errors that judge one item's content (a safety block, an
// unsupported language, an empty text) are also VerdictErrors: the item's
// fault, never evidence that the stage is misconfigured, which a runner
// tells apart by their ItemVerdict method. Their advice is to edit the row
// in the input file, since the same text earns the same verdict again.
//
// Files: llm.go (configuration, the preset, Process), llm_call.go (the request and
// the repair call), llm_response.go (reading and checking the answer),
// gemini_errors.go (error classes and messages), llm_batch.go (the Batch
// API's requests and answers), llm_cache.go (cache key, estimates),
// llm_client.go (endpoint, transport), llm_schema.go, when.go; classify.go
// is the classify preset, all of it.
//
// Aggregate turns a classified item into a pipeline.Fact (label, group
// values such as app and month, rating) that the store folds into the
// run's tally in the transaction that completes the item; Aggregate.Fact is
// exported so a check can recompute the tally from the classify outputs.
// With Count (STAGE.FIELD) it counts any output field of any stage instead
// of the classify label.
//
// Every stage is safe for concurrent use and keeps no state between calls.
package stages
