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
package monitor
