// Package bench compares concurrency strategies for draining LLM work
// against the Gemini simulator, and measures the engine itself.
//
// Run drains the same generated reviews once per Strategy, each time
// through a fresh geminisim.Server and a fresh store.DB, with the real
// stages (Sanitize, Classify through the genai client, Aggregate) driven by
// pipeline.Runner. Only the classify stage's configuration differs between
// strategies: its workers, its limiter, and for the seeds how a 429 is
// retried. Every strategy therefore pays the same engine, the same HTTP
// client and the same simulator, and the figures differ only by what the
// strategy does with the quota.
//
// The figures of a Result are measured where they cannot be gamed: calls,
// 429s and answered items come from the simulator's own accounting, items
// lost from the database at the end, concurrency from an http.RoundTripper
// that counts the requests really in flight (a worker sleeping in a backoff
// is not a call in flight), and the quota's capacity is integrated from
// its configuration and schedule over the run's wall time (Capacity). That
// capacity is the physical limit: no client can get more requests admitted,
// so goodput, the items answered over the capacity, is at most about 1.
//
// RunMatrix (`sawtooth bench --matrix`) runs every strategy on every quota
// shape (Shapes: sliding log, fixed window, token bucket, RetryInfo exact,
// coarse or absent, refusals counted, a server-side concurrency cap
// answered with bare 429s, heavy-tailed latency growing with load, 503
// bursts; windows scaled to 1-4 s) and prints one table of medians. Its
// yardstick is Perfect: the simulator's own quota run in virtual time by a
// client that sends each request the instant it is admitted, so the score
// (perfect time over wall time) is exact for each shape, where Capacity
// integrates a request rate and fits only a sliding log.
//
// RunRandom (`sawtooth bench --matrix --random N --seed S`) measures the
// law itself rather than the whole engine: it draws N quota shapes from
// internal/quotasim's random families and drives limiter.Virtual through
// each in virtual time against quotasim's perfect client, in seconds.
// Shape i of seed S has seed S+i, so any line of the table replays with
// --random 1 --seed (its seed).
//
// RunEngine (`sawtooth bench --engine`) measures the engine itself: it
// drains generated reviews through sanitize, InstantClassify (a stand-in
// for classify that makes no call) and aggregate with pipeline.Runner, on
// PostgreSQL with 1, 2, 4... workers (each its own connection pool and
// runner, claiming with leases and committing fenced, as separate
// processes would) and on bbolt (one worker), checks that every item
// ended done with the aggregate equal to its recomputation, and reports
// items/s and whether the commits were durable.
//
// The engine benchmarks (go test -bench) are in this package's tests:
// BenchmarkDrain and BenchmarkBoltBatchedPut put the engine's throughput
// next to bbolt's own for the same records, and BenchmarkDrainMillion (run
// only when SAWTOOTH_BENCH_1M=1) measures ingest, drain and resume start-up
// for a million items. RESULTS.md holds the latest figures and the exact
// commands.
package bench
