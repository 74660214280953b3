// Package monitor shows a run while it lasts and the state of a database
// afterwards: the terminal bars or periodic slog progress records, the live
// status file a run publishes beside its database (so that `status` answers
// while the run holds bbolt's lock), the Prometheus metrics, `status
// --watch`, and the run summary.
//
// It never opens a database and never imports the command layer: callers
// hand it values (stage names, counts, a status view) and small interfaces
// (pipeline.Limiter, a cost function, a frame printer). Its errors come
// from bad options (a log format or level, a metrics address): the command
// layer reports them as usage errors.
//
// It is larger than our ~500-line guide because it holds the five
// displays of a run named above; each is its own file (progress.go for
// the bars and progress records, live.go for the status file, metrics.go,
// watch.go, summary.go and status.go).
package monitor
