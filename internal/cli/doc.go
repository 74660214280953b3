// Package cli is sawtooth's command layer: one file per command, each
// with its options struct, the flags that fill it beside it, and a
// runX(ctx, opts) that does the work against the writers in the options,
// so it is testable without urfave/cli. flags.go holds the flag sets
// several commands share; build.go constructs the stages and the limiter
// from the options; drain.go is the engine call that run, retry, rerun
// and demo share. Around them: config.go reads the strict --config file,
// open.go checks a --db path before the store opens it, settings.go keeps
// each stage's recorded settings (diffs, re-runs), plan.go prices a
// re-run, ingest.go checks and ingests the input file, budget.go prints
// what a run left of its budget, batchmode.go runs classify through batch
// jobs (--mode batch|auto) and batchcmd.go is `sawtooth batch`, app.go
// turns urfave/cli's mistakes into usage errors. jobrun.go runs a job file
// (`run -f`, or `run --db` resuming the job a database recorded): any
// stages, one limiter per LLM stage, the stored job's diff, retry and
// rerun on a job's database; jobbuild.go builds its stages; jobcmd.go is
// init, job show and plan.
//
// The package is larger than our ~500-line guide because it holds every
// command (a dozen of them, each with its options and flags); each file
// has one job.
//
// Every command checks all its arguments before it opens the database for
// writing or creates a file, so a command that fails on them changes
// nothing.
//
// Errors are typed, never exit codes: a mistake in how a command was
// called is a *UsageError, a run that stopped early but can resume wraps
// pipeline.ErrStopped, anything else is fatal. The main package maps them
// to exit codes in one place.
package cli
