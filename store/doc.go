// Package store keeps a sawtooth pipeline in one bbolt file.
//
// Layout (bucket -> key -> value):
//
//	meta            schema, definition (stage names + config fingerprints), created, limit/<stage>
//	items           id -> original record (JSON), rewritten only when the id's text changes
//	state           id -> where the item is: stage index, status, queue seq, text hash (binary)
//	todo/<stage>    big-endian sequence -> id: the stage's queue in arrival order
//	out/<stage>     id -> the stage's output (JSON)
//	dead/<stage>    id -> pipeline.DeadLetter (JSON), kept until re-queued
//	agg             the tally of the last stage's facts, one counter per key:
//	                n, l\0<label>, g\0<field>\0<value>\0<label>, r\0<label>, e\0<label>
//	runs            run id -> pipeline.RunSummary (JSON)
//	series/<run>    big-endian sequence -> []pipeline.Sample (JSON)
//	answers/<stage> cache key -> the answer and the usage it was billed (JSON), see cache.go
//	ledger          stage -> lifetime spend, savings, paid and cached answers (binary)
//
// Every transition of an item (ingest, a stage's success or dead letter,
// re-queue, re-run) is one transaction, and each transition checks the
// item's state first, so applying the same transition twice is a no-op.
// The state bucket is the single answer to "where is item X": an item is
// queued at exactly one stage, dead at exactly one stage, or done. Check
// verifies that every bucket agrees with it.
//
// A DB is safe for concurrent use by many goroutines of one process; bbolt's
// file lock keeps other processes out, and Open gives up after
// Options.LockTimeout with ErrInUse instead of waiting forever.
package store
