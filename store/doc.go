// Package store keeps a sawtooth pipeline in one bbolt file. *DB
// implements pipeline.Database and passes its contract suite
// (store/storetest).
//
// Layout (bucket -> key -> value):
//
//	meta            schema, format (the record format, see format.go), definition (stage names,
//	                fingerprints, fields read), created, limit/<stage>, job (the job as last run,
//	                opaque to the store), counts (how many items are queued, dead or in a
//	                batch at each stage and done, kept in each transition: counts.go)
//	dict            i<id> -> string, s<string> -> id: short strings packed records refer to
//	items           id -> original record (packed, see codec.go), rewritten only when the id's
//	                content changes: the only copy of the text; a long one holds its last
//	                bytes and a reference to the chunks before them in longs (long.go)
//	longs           big-endian sequence -> a quarter page of a long item record, in order
//	state           id -> where the item is: stage index, status, queue seq, content hash (binary)
//	todo/<stage>    big-endian sequence -> id: the stage's queue in arrival order
//	out/<stage>     id -> the stage's output, packed (a string equal to the item's text is one
//	                byte), or a reference to the cached answer it equals; an output that is
//	                nothing but the item's text (a clean text sanitized) has no entry: a bit of
//	                the item's state refers to the stage's shared record, meta shared/<stage>
//	                (shared.go)
//	dead/<stage>    id -> pipeline.DeadLetter (JSON): the item's current dead letter
//	history         len(id), id, sequence -> pipeline.PastDeadLetter (JSON): dead letters an
//	                item left (re-queue, re-run, edit); never deleted except by Prune
//	agg             the tally of the last stage's facts, one counter per key:
//	                n, l\0<label>, g\0<field>\0<value>\0<label>, R\0<label> (exact rating
//	                sum, see pipeline.RatingSum), e\0<label>; and the report's cube, kept in
//	                the same commits: C, c\0<fields, values, label> (cube.go)
//	usage           t\0<stage>, r\0<run>\0<stage> -> tokens billed by committed transitions
//	runs            run id -> pipeline.RunSummary (JSON)
//	series/<run>    big-endian sequence -> []pipeline.Sample (JSON)
//	answers/<stage> cache key (32 bytes) -> the answer and the usage it was billed, packed;
//	                the only copy of an answer outputs refer to (by the key's first 8
//	                bytes, 16 in a file written before format 6, no two keys sharing
//	                them), never deleted (cache.go)
//	ledger          stage -> lifetime spend, savings, paid and cached answers (binary)
//	reports         period -> ReportStamp (JSON): the fingerprint of the figures the last
//	                report of that period showed, see reports.go
//	batches         big-endian job number -> pipeline.BatchJob (JSON): Batch API jobs (batch.go)
//	batch-sends     id -> stage index, how many batch jobs asked for the item there, the queue
//	                seq a job gave it back at (batchsends.go)
//
// Records are written in format 7 (codec.go): packed JSON with a tag
// byte, a long record deflated (flate.go) and an item's kept in chunks
// that fill their pages (long.go), short repeated strings coded
// through dict, an output that is the item's text (or a cut of it) one
// byte, a string made from the text by small changes an edit of it
// (edit.go), an output equal to its cached answer a reference to it by
// the first 8 bytes of its key (answerRef), so the text and each answer
// are stored once, and an answer's usage that its output carries too
// once (usageIn).
// A file of format 1 (sawtooth before the format key) is read as it is by
// read-only opens and upgraded by a writable open or Compact into a copy
// that replaces it (format.go); a file of format 2 to 6 only has its
// format key raised, its records being format 7 records. Compact also
// rewrites a file without free pages (compact.go).
//
// Every transition of an item (ingest, a stage's success or dead letter,
// re-queue, re-run, prune) is one transaction, and each transition checks
// the item's state first, so applying the same transition twice is a
// no-op, and a transition whose item was re-queued meanwhile (its queue
// sequence changed) is ignored. The state bucket is the single answer to
// "where is item X": an item is queued at exactly one stage, dead at
// exactly one stage, or done.
//
// The content hash covers the record's text and every field. An edited
// record re-enters at the first stage that reads a changed field
// (pipeline.StageDef.Reads); an edit nothing has read yet only replaces
// the record.
//
// A stage list may grow: opening with stages added to the stored list
// (none removed or reordered) records the new list and, in the same
// transaction, sends every item past the first added stage back to its
// queue (insertStages), so only the added stages and those after them
// run again. Any other change of the stage names is ErrDefinition.
//
// Two consistency checks: Open runs a cheap one (checkFile: the meta
// pages, the root page and the free list, a few pages whatever the file's
// size) before bbolt reads the file, and refuses anything that is not a
// bbolt file (empty, foreign, a directory, a FIFO) with ErrNotDatabase,
// and a damaged one with ErrCorrupt. Check is the full one behind
// `sawtooth verify`: bbolt's page walk, every bucket against the state
// bucket, and the tally against its recomputation from the stored facts.
//
// A DB is safe for concurrent use by many goroutines of one process; bbolt's
// file lock keeps other processes out, and Open gives up after
// Options.LockTimeout with ErrInUse instead of waiting forever. A writable
// open marks run records left "running" by a dead process as killed.
//
// The package is larger than our ~500-line guide because the item state machine and everything that must read the
// file under the same rules live together: opening and the schema
// (store.go), the transitions (transitions.go), reads and the checker
// (read.go), the tally (agg.go), dead-letter history, usage and runs
// (history.go), the pre-open page checks (safe.go), how full bbolt packs
// pages (fill.go) and the packing of outputs no commit will add to
// (settle.go), each file one of those.
package store
