// Package cli is sawtooth's command layer: one file per command, each
// with its options struct, the flags that fill it beside it, and a
// runX(ctx, opts) that does the work against the writers in the options,
// so it is testable without urfave/cli. flags.go holds the flag sets
// several commands share; build.go constructs the stages and the limiter
// from the options; drain.go is the engine call that run, retry, rerun
// and demo share.
//
// Errors are typed, never exit codes: a mistake in how a command was
// called is a *UsageError, a run that stopped early but can resume wraps
// pipeline.ErrStopped, anything else is fatal. The main package maps them
// to exit codes in one place.
package cli
