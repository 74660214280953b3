// Package postgres keeps a sawtooth pipeline in PostgreSQL, so that many
// worker processes on many hosts can drain one pipeline and share one API
// quota. It implements pipeline.Database with the bbolt store's semantics
// (both pass store/storetest) and pipeline.Claimer for fleets, through
// github.com/jackc/pgx/v5 and plain SQL.
//
// # One pipeline per schema
//
// A pipeline lives in one PostgreSQL schema (Options.Schema, default
// "sawtooth"); every session's search_path names it, so the SQL is
// unqualified. One database can hold several pipelines, and the DSN
// stays an ordinary libpq URL. Open creates the schema, or migrates an
// older one, in one transaction holding a transaction-level advisory
// lock on the schema's name, so two processes opening a new database at
// once do not race; migrations are numbered steps (schema.go) and the
// version is in meta. Passwords come from the DSN, PGPASSWORD or
// ~/.pgpass, as libpq reads them; Path and every message carry the DSN
// without its password.
//
// # Tables
//
//	meta         key -> value: schema version, definition, created, limit/<stage>
//	item         id -> record (binary, binrecord.go; JSON before schema step 13; its fields named by number and without its id from step 18), its content hash derived by ingest from the record (schema step 17; stored before, hex before step 14, bytes from 14)
//	field_name   number -> an input field's name, for the records (names.go; schema step 18)
//	todo         seq -> stage, id, attempt, owner, visible_at: the queues (unfinished items only)
//	output       id -> the item's outputs of every stage in one row, framed (outrow.go; schema step 15; a row per (id, stage) before), each packed (pack.go; schema step 13), else whole, or one that repeats the item's text without it (mark.go; schema step 11); a done item's cube quote, key_id and conf, indexed in report's quote order where it has one (schema step 16; a cube_quote row per done item before)
//	dead         id -> stage, dead letter (JSON): an item is dead at one stage at most
//	history      every dead letter an item left (re-queue, re-run, edit)
//	tally_*      the aggregate as counters, each spread over 16 shards
//	cube_cell    (group values, label, shard) -> items, rated items, rating sum: the per-period cube (cube.go; schema step 8)
//	cube_key     (cube cell, label) -> a small id (schema step 12)
//	usage        (run, stage, shard) -> tokens billed by committed transitions
//	run, sample  run records and per-second samples
//	quota        (unlogged) per quota key: a GCRA schedule, congestion epoch
//	             and the fleet's learned rate (fleetlaw.go; schema step 3)
//	answer       (stage, cache key) -> output, usage billed (schema step 2)
//	ledger       (stage, shard) -> spent, saved (nanodollars), paid, cached (schema step 2)
//	answer_flight (unlogged) (stage, cache key) -> the worker buying the answer, until when (schema step 2)
//	worker_session id -> owner, timeout, last beat: each fleet worker's heartbeat (schema step 5)
//	batch_job    num -> stage, closed, owner, lease_until, record (JSON): Batch API jobs (batch.go; schema step 6)
//	todo.batch_sends  how many batch jobs asked for the row's item at its stage (batchsends.go; schema step 8)
//
// Where an item is is derived, not stored: queued at the stage of its
// todo row, in a batch job when that row names one (todo.batch), dead at
// the stage of its dead row, done when it has neither.
// A transition therefore writes only what it must (delete the todo row,
// append the output to the item's row of outputs, insert the next todo
// row, add to the tally and the cube), and keys make the double places impossible (todo.item_id is
// unique, dead.item_id is the key). Check verifies the rest (outputs
// match the position, no orphans, stored tally and cube = recomputed).
//
// Every transaction that moves an item first locks its item row, in id
// order, so moves of one item are serialised and never deadlock; the
// commands that move many items at once (ingest, re-queue, re-run,
// prune) also take an advisory lock per schema, so they run one at a
// time while commits go on. Statements that change several queue rows
// lock them in sequence order. Transactions aborted as deadlock victims
// are retried. Folds and usage add to the aggregate rows of one of 16
// shards per commit, in sorted key order: concurrent commits rarely
// wait on one hot counter row, and readers sum the shards. Rating sums
// are numeric, exact at any size, as the bbolt store's are.
//
// # The answer cache and the ledger
//
// As in the bbolt store, a Succeeded transition that carries a cache key
// keeps its answer (pipeline.AnswerCache), and every applied transition
// adds its money to its stage's lifetime ledger (pipeline.Ledgers, read by
// --budget-total, status and the summary), in the transaction that applies
// it: a fenced-off or stale transition caches nothing and adds nothing,
// like its usage. A Billed transition (an item given back after billed
// calls) records its money only while its entry is still queued at the
// claim's attempt, and leaves the entry where it is.
//
// One call per new question holds across the fleet
// (pipeline.AnswerFlights): before buying a key, a worker takes its
// flight, a row naming it as the buyer until a lease from now on the
// database clock; another worker that meets the key waits, looking for
// the answer every pipeline.FleetFlightPoll, until it is committed (then
// reused) or the flight ends without one (then it takes the flight and
// buys). The commit that carries the answer ends its flight in the same
// transaction, applied or fenced off, so whoever takes the flight next
// finds the answer or buys it; a failed or given-back owner ends it
// itself, and a dead one's ends with its lease. The owner renews its
// flight at each retry. Two workers still both pay when one call
// outlasts the lease (its flight ends while it runs), or when the
// flights cannot be read (a worker then buys, as without them).
// If two answers for one key are committed, the first is kept (ON
// CONFLICT DO NOTHING) and both results stand.
//
// # Leases and fences
//
// A worker claims up to N entries of a stage in one statement: the
// oldest rows whose visible_at has passed, picked with FOR UPDATE SKIP
// LOCKED (concurrent claims skip each other's rows rather than wait),
// each updated with attempt + 1, its owner and visible_at = now() + the
// lease. Only the database clock sets lease ends. The worker renews the
// leases of what it still holds while its calls run (Renew returns the
// ones it lost) and commits each result with CommitFenced, whose delete
// of the todo row matches the claim's attempt: if the lease ran out and
// another worker claimed the entry, the attempt moved on, the old
// worker's commit matches nothing and is not applied (an expired lease
// nobody claimed still commits: nobody else has the item). A database
// restart keeps every row and visible_at: a worker keeps the answers it
// could not commit while the server was away and commits them when it
// answers, before their leases end (at least three quarters of a lease
// after it went, leases being renewed every quarter), so an outage
// shorter than that pays for no item twice.
//
// A lease must outlast the longest call (a flex call takes minutes), so
// a crashed worker is noticed by a heartbeat instead (session.go): each
// runner registers a worker_session row, beats it every timeout/4
// (pipeline.DefaultHeartbeat: 10 s), and its claims and answer flights
// record the session. An entry whose session has not beaten within its
// timeout on the database clock, or was deleted (clean shutdown), is
// claimable like one whose lease ended; a dead session never beats
// again, so its worker, if only paused or cut off, drops what it holds
// and begins a new one, and its late answers are fenced off by the
// attempt as before. A server restart counts as a beat (pg_postmaster_start_time),
// so workers are not taken for dead for an outage of the database. Rows claimed
// without a session (a schema-4 sawtooth, a handle that began none) hold
// for their lease. There is no reaper. Holders lists who holds what, for status. Claims, renewals
// and fenced deletes find their rows through indexes (the picked or
// given sequences as one seq = ANY array), and ingest and restore
// analyze the queue table when it has no statistics yet: without them
// the planner takes a stage for a few dozen rows and sorts all of it
// for each claim. A fleet worker waiting for the end of its stage counts
// the queues alone (CountQueued). The lease columns
// are unindexed and the queue's pages are filled to 30%, so claims and
// renewals are HOT updates: the new row version stays on its page and
// no index changes. No transaction is ever held across a call, and sessions
// idle in a transaction are ended after DefaultIdleInTransaction: a
// long transaction would pin the queue's dead rows.
//
// # One quota for the fleet
//
// SharedQuota keeps one row per quota key: a GCRA schedule paces the
// whole fleet with one statement per call, and a congestion epoch turns
// the many 429s of one event, from every process, into one event: only a
// call reserved at the current epoch raises it, and each process applies
// one decrease per new epoch it sees. The pace is a rate given (--rpm, a
// quota a 429 named) or, when none is, one the fleet learns: the row
// counts grants and 429s, so at each event the law (fleetlaw.go, pure,
// after the limiter package's) reads what the quota admitted, paces just
// under it, and climbs back one compare-and-set step per answer lag for
// the whole fleet, never N steps for N workers. Before the first event
// the fleet slow-starts as one: the row paces it from a low rate doubled
// each short lag the fleet sent at it (the same compare-and-set), so N
// workers ramp no faster than one. The schedule is booked a short way
// ahead only (BookAhead), so a new pace or a 429 takes hold within it.
// FleetLimiter is the pipeline.Limiter built on it: each worker's calls
// in flight grow only while the pace does not bind them, and fall with
// the fleet's events only while no rate is paced; a call that waited for
// its slot reads the fleet's cooldown before it goes out, and books
// again rather than go out into a spent quota. A wave of a worker's own
// timeouts (limiter.TimeoutWaves) halves that worker's calls in flight,
// as the single process's law does; no 429 comes, so nothing of it goes
// through the row.
//
// # Why plain SQL rather than River
//
// River (riverqueue) would run one job per item per stage. It has no
// lease heartbeat (stuck jobs are rescued after one fixed, per-client
// delay, an hour by default), fences completion on state = running only
// (a rescued job's old worker can still complete it), keeps concurrency
// limits per process (global limits and workflows are paid features),
// has no rate limiting, and brings its own schema, migrations and leader
// election for semantics this store already has. The claim, renew and
// fenced-complete statements here are a handful of SQL statements, and
// the bbolt store's contract suite checks them.
//
// Files stay under 600 lines; the package has one file per concern:
// postgres.go (Open, options, definition), schema.go, commit.go,
// admin.go (ingest, re-queue, re-run, prune), read.go, check.go,
// tally.go, runs.go, claim.go, session.go, cache.go, quota.go, fleetlaw.go
// (the fleet's shared rate), workerlaw.go (a worker's calls in flight),
// fleetlimit.go,
// outrow.go (an item's outputs in one row),
// mark.go (outputs that repeat their item's text), pack.go and
// binrecord.go (outputs and records stored compactly; packfill.go
// rewrites those stored before) and shrink.go (a drained queue's
// indexes).
package postgres
