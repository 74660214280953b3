package cli

import (
	"errors"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// The stages and ingest word their settings as the command line or the job file
// that set them calls them: a dead letter's message is stored when it is
// written, so they are told the words (stages.Names, ingest.Names); an error returned
// before any call (stages.NoPriceError) is worded here.

// flagInputNames are the flags that set how the input is read: a run
// from flags has none of its own (inputOptions.Names is zero).
var flagInputNames = ingest.Names{Format: "--format", IDField: "--id-field", TextField: "--text-field",
	GroupBy: "--group-by", DateField: "--date-field", RatingField: "--rating-field", DateFormat: "--date-format",
	RatingRange: "--rating-range", MaxLineBytes: "--max-line-bytes", MaxFieldLines: "--max-field-lines", Set: "pass %s"}

// jobInputNames are a job file's keys for the same.
var jobInputNames = ingest.Names{Format: "input.format", IDField: "input.id", TextField: "input.text",
	GroupBy: "aggregate.group_by", DateField: "aggregate.date", RatingField: "aggregate.rating", DateFormat: "input.date_format",
	RatingRange: "input.rating_range", MaxLineBytes: "input.max_line_bytes", MaxFieldLines: "input.max_field_lines", Set: "set %s in the job file"}

// flagStageNames are the flags that set classify's settings.
var flagStageNames = stages.Names{Model: "--model", MaxOutputTokens: "--max-output-tokens"}

// jobStageNames are a job file's keys for an LLM stage's settings.
var jobStageNames = stages.Names{Model: "model in the job file", MaxOutputTokens: "max_output_tokens in the job file"}

// stageNames is how the user set the stages bo builds.
func (bo buildOptions) stageNames() stages.Names {
	if bo.FromFlags {
		return flagStageNames
	}
	return jobStageNames
}

// wordPrice words a stage's missing price with what sets it (at names
// the stage in a job file); any other error is returned as it is.
func (bo buildOptions) wordPrice(err error, at string) error {
	var np *stages.NoPriceError
	if !errors.As(err, &np) {
		return err
	}
	if bo.FromFlags {
		return &wordedError{err: err, msg: np.Text("pass --price-in and --price-out")}
	}
	return &wordedError{err: err, msg: at + ": " + np.Text("set price.input_per_m and price.output_per_m")}
}

// wordStoreError words what the store asks of a path that holds no usable
// database (store.AnotherDB) with the flag that gave the path.
func wordStoreError(err error, flag string) error {
	msg := err.Error()
	if !strings.Contains(msg, store.AnotherDB) {
		return err
	}
	return &wordedError{err: err, msg: strings.Replace(msg, store.AnotherDB, "choose another "+flag, 1)}
}
