// Package pipeline is sawtooth's domain and engine.
//
// An Item is one input record (an id, its text and any other fields). A
// Stage turns an item into a JSON output or an error. The Runner drains a
// fixed, ordered list of stages: each stage has a dispatcher that walks that
// stage's queue forward in arrival order and a pool of workers; a result is
// handed to a single committer goroutine that applies many transitions in
// one store transaction (group commit). An item reaches the next stage's
// queue only once its transition has been committed, so the store is always
// the truth and a run killed at any instant resumes where each item was.
//
// Errors returned by a stage are classified once, in Classify:
// Permanent errors dead-letter the item at once; RateLimited errors slow the
// stage's Limiter and retry the same item without spending an attempt; Fatal
// errors stop the run; everything else is transient and retried in place with
// exponential backoff and jitter until the stage's attempt budget is spent.
//
// The package imports none of its implementations: the store, the stages and
// the limiter implement the small interfaces declared here (Store, Stage,
// Limiter) and main wires them together.
package pipeline
