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
// A transition carries the usage of every call that led to it, so what was
// paid is recorded with what it bought.
//
// What a kill can throw away is bounded: no call starts while a paid
// result has waited Runner.MaxBacklogAge (100 ms) for its commit, or while
// Runner.MaxBacklog paid results wait, so a slow disk slows the calls
// instead of piling up answers. A result that billed nothing (a local
// stage's, a cached answer) is not counted: a kill re-does it for free.
// A failed commit is tried again (Store.Commit is idempotent) before the
// run fails; an outcome is counted only once its commit succeeded.
//
// Errors returned by a stage are classified once, in ClassOf, and what
// each class leads to is decided once, in the pure function decide
// (policy.go), from the class, the item's attempts, the stage's config and
// the time: Permanent errors dead-letter the item at once; RateLimited
// errors slow the stage's Limiter and retry the same item without spending
// an attempt (a per-day quota, a retryDelay over MaxWait, or
// MaxRateLimited refusals in a row, or refusals with no success for
// MaxRefused, warned of halfway, park the stage); Unavailable errors (no
// connection, including a connect timeout) wait without spending an
// attempt until the outage outlasts MaxOutage (30 s before the endpoint has
// answered once), then park the stage; Fatal errors stop the run; Halt
// errors (an account out of credits: every call refused until someone
// acts) stop every stage taking work, and the run ends as ErrStopped,
// resumable; everything else is transient and retried in place with exponential
// backoff and jitter until the stage's attempt budget is spent. An API
// stage whose first 25 calls all fail the same permanent way, none having
// succeeded, stops the run: that is the request or the account. Verdicts
// on an item (an ItemVerdict error, or any billed answer) never count
// toward that stop.
//
// Overloaded answers (503 "the model is overloaded") spend no attempt and
// say nothing of the quota. When they show the server refusing
// everything, the stage's overload hold (overload.go) keeps its calls
// back, lets one probe go, and opens once the server serves again; each
// overload's length times the next one's first probe, and a Limiter that
// implements OverloadListener is told when the hold closes and opens.
//
// A stage that implements Cacheable names each item's request by a key;
// the runner pays for each key once. An item whose key was answered
// before (a store that implements AnswerCache keeps answers by stage and
// key, written with the transition that bought them) or is being answered
// by an identical item in flight reuses that answer: no call, counted as
// Cached with what it saved. The first item in flight owns the key and
// the others wait for it; an owner that fails leaves its waiters to try
// on their own, never to share its dead letter. Runner.NoCache turns it
// off.
//
// A stage with a Price has its calls priced (StageStats.CostUSD), and a
// Runner with a Budget reserves each call's estimated cost before making
// it (input from Estimator or the text's length, scaled by what calls
// were billed against their estimates; output at the largest answer seen)
// and stops starting calls when the next would cross a cap: the stage
// parks once the calls in flight have settled, so the run ends within
// one call's cost of the cap, never above it (as long as no answer is
// longer than every one before it). The lifetime cap counts what a store
// that implements Ledgers has committed, including what items given back
// were billed (the Billed outcome).
//
// A Store that also implements Claimer is shared by a fleet: many
// processes, on many hosts, drain its queues at once. Each stage's
// dispatcher then claims entries with a lease (Runner.Lease, 2 min)
// instead of walking the queue; a heartbeat renews the leases of every
// entry this process holds each Lease/4, and cancels the call of an entry
// whose lease it lost (claimed again elsewhere) or could not renew in
// time (renew sent + Lease - 10 s, on the runner's clock). Every commit
// is fenced by the claim's attempt: a result whose lease was lost is
// dropped and counted (StageStats.LeasesLost), never an error. An entry
// claimed more than Runner.MaxClaims times is dead-lettered. No
// transaction is held across a call. A store without Claimer (bbolt: one
// process holds the file's lock) keeps the cursor walk.
//
// When a fleet worker's store fails (the database down or unreachable),
// the worker starts no call until a request to it succeeds again, keeps
// the answers of its calls in flight in memory, and retries claims and
// commits every second (the commit at once when another request
// succeeds) for Runner.StoreRetry (5 s). Past that the worker gives the
// store up: it claims and renews no more, lets its calls in flight finish
// (or cancels them at renew sent + Lease - 10 s), keeps trying their
// answers until their leases end as the database has them (the last
// renewal sent + Lease) and never after, drops the rest uncommitted
// (counted as lost leases), and Run returns a StoreLostError, a
// resumable stop. Leases are renewed every Lease/4, so each has at least
// three quarters of Lease left when the database goes: an answer is paid
// for twice only if the database stays unreachable longer than that (or
// its worker dies holding it, or its call outlasts the lease); what is
// billed twice so is counted. Nothing committed is lost.
//
// The Runner takes one Clock for every timestamp and wait (backoff, the
// grace period after a stop, sampling, the backlog's age), so its tests run
// in virtual time.
//
// Files: run.go (Run, configuration, counters), park.go (how a run stops
// early: fail, park, halt), dispatch.go (reading the queues), claim.go, fleet.go and lease.go (claims, leases, heartbeat), process.go (one item's calls, carrying out decide's action),
// policy.go (decide), commit.go (the committer and the backlog bound),
// sample.go (progress and the series), cache.go (the answer cache and
// the flights per key), price.go (what a call costs, by tier and cached
// input), budget.go (the budget and estimates),
// overload.go (the overload hold), clock.go, errors.go (the classes),
// interfaces.go and item.go (the domain types), tally.go (the aggregate).
//
// The package imports none of its implementations: the store, the stages and
// the limiter implement the small interfaces declared here (Store, Stage,
// Limiter) and internal/cli wires them together.
//
// A Go program can do the same wiring with stages of its own: open a
// store.DB (store.Open) with one StageDef per stage, ingest records, give
// the Runner the library's stages and its own (any type with Name and
// Process), an AIMD limiter (limiter.New) on the API stage, and call Run;
// running again on the same file resumes. Dead letters, run records and
// report.Load read the file as the sawtooth command does. Example_customStage
// puts a language detector between classify and aggregate.
//
// The package is over our ~500-line guide because it holds both the
// domain (item.go, database.go, interfaces.go, errors.go, tally.go,
// price.go) and the engine that drives it
// (run.go, dispatch.go, process.go, policy.go, commit.go, sample.go,
// claim.go, clock.go, and the concerns the engine owns: budget.go,
// cache.go, overload.go, fleet.go, lease.go); each file has one job.
// Splitting the engine out would export
// its internals to one caller.
package pipeline
