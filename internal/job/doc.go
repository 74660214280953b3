// Package job is sawtooth's job file: one YAML document holding the whole
// job (the database, the input, the backend and the stage list), decoded
// strictly, validated before anything runs, and turned into the stage list
// the store records.
//
// Decoding walks the YAML node tree against the Go types of this package
// (their yaml tags are the valid keys): an unknown key, a wrong type, a key
// given twice or a bad value is an *Error naming the file, the line and the
// key's path (stages[2].llm.limiter.ceiling), with the nearest valid key
// when one is close. Every problem is reported, not only the first. The
// same decoder reads the older flag-mirroring --config files (DecodeFlat).
//
// A run from flags compiles into a Job too (the CLI's compile): the
// built-in pipeline, its LLM stage the classify preset, with every
// setting the flags give, stored like a job file's.
//
// A stage's configuration is data: Stage.Def gives the pipeline.StageDef
// the store keeps (name, fingerprint, the stage's canonical JSON with the
// content hashes of its prompt and schema files), so a stored job can be
// printed back (Stored.YAML) and compared with a new one (Diff): which
// stage, which key, old -> new.
//
// Files: decode.go (the strict node walker and its errors), flat.go (the
// older flag-mirroring --config files, same decoder), job.go (the schema
// and validation), engine.go (the keys that tune how a job runs: workers,
// fleet, timeouts, stops, prices, batch jobs, the classify preset), check.go (the names templates, conditions and count:
// read, checked against the stages' outputs and on a sample item before
// anything is sent), stages.go (the stage list as the store records it:
// names, fingerprints, configuration), stored.go (what the database keeps
// and the diff), plan.go (`sawtooth plan`'s estimate), starter.go (the
// commented file `sawtooth init` writes).
package job
