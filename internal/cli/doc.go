// Package cli is sawtooth's command layer: one file per command, each
// with its options struct, the flags that fill it beside it, and a
// runX(ctx, opts) that does the work against the writers in the options,
// so it is testable without urfave/cli. flags.go holds the flag sets
// several commands share.
//
// One definition of a pipeline: a run's flags compile into a job.Job
// (flagjob.go), the same struct a job file decodes into, with the
// classify preset as its LLM stage; jobbuild.go is the one builder of
// every run's stages and limiters, whatever defined the job; drain.go is
// the one drain that run, retry, rerun and demo share. Its start differs
// only in how a changed definition is settled and worded: flags name the
// flags (openFlags in flagrun.go: reconcile; keepStored, settings.go),
// a job file names its keys (openJob in jobrun.go: the stored job's
// diff, jobwork.go for what a dry run or a re-run would do). Every run
// stores its job, so
// `job show` prints it, `run -f` accepts what it prints and `run --db`
// resumes it. A later run naming no flag that defines the pipeline (only
// the run's own: --input, --base-url, --budget, --quiet...) resumes with
// every setting the database recorded; one naming any is defined by its
// flags, the defaults for the rest, as a run from flags always was: a
// change to a stage's answers is refused with the diff (nothing changed)
// unless --rerun-changed, any other change is adopted, listed and stored.
//
// Around them: config.go reads the strict --config file (flag values,
// which compile into the job like any flag), open.go checks a --db path
// before the store opens it, plan.go prices a re-run, ingest.go checks
// and ingests the input file, budget.go prints what a run left of its
// budget, batchmode.go runs the classify preset through batch jobs (mode
// batch|auto) and batchcmd.go is `sawtooth batch`, app.go turns
// urfave/cli's mistakes into usage errors, jobcmd.go is init, job show
// and plan.
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
