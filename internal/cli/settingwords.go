package cli

import (
	"errors"
	"regexp"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// Ingest words its settings as the command line or the job file that set
// them calls them (ingest.Names); the stages name theirs in plain words,
// worded here when a message is shown, since a dead letter outlives the
// command that wrote it; an error returned before any call
// (stages.NoPriceError) is worded here.

// flagInputNames are the flags that set how the input is read: a run
// from flags has none of its own (inputOptions.Names is zero).
var flagInputNames = ingest.Names{Format: "--format", IDField: "--id-field", TextField: "--text-field",
	GroupBy: "--group-by", DateField: "--date-field", RatingField: "--rating-field", DateFormat: "--date-format",
	RatingRange: "--rating-range", MaxLineBytes: "--max-line-bytes", MaxFieldLines: "--max-field-lines", Set: "pass %s"}

// jobInputNames are a job file's keys for the same.
var jobInputNames = ingest.Names{Format: "input.format", IDField: "input.id", TextField: "input.text",
	GroupBy: "aggregate.group_by", DateField: "aggregate.date", RatingField: "aggregate.rating", DateFormat: "input.date_format",
	RatingRange: "input.rating_range", MaxLineBytes: "input.max_line_bytes", MaxFieldLines: "input.max_field_lines", Set: "set %s in the job file"}

// settingWords are how the user sets an LLM stage's settings: flags, or
// a job file's keys. The stages name them in plain words
// (stages.ModelWords, stages.MaxOutputTokensWords), and a dead letter
// keeps those words: they are worded here when shown.
type settingWords struct {
	model, maxOutputTokens string
}

// flagSettingWords are the flags that set classify's settings.
var flagSettingWords = settingWords{model: "--model", maxOutputTokens: "--max-output-tokens"}

// jobSettingWords are a job file's keys for an LLM stage's settings.
var jobSettingWords = settingWords{model: "model in the job file", maxOutputTokens: "max_output_tokens in the job file"}

// wordsFor are the words of a run from flags (fromFlags) or a job file.
func wordsFor(fromFlags bool) settingWords {
	if fromFlags {
		return flagSettingWords
	}
	return jobSettingWords
}

// storedWords are the words of what db records: a job file's keys for a
// job run from a file, flags for one compiled from flags (or no job, as
// runs from flags recorded before jobs were, or one it cannot read). It
// reads the open db: opening the path again would wait for a lock, or
// connect, a second time.
func storedWords(db pipeline.Database) settingWords {
	jdb, ok := db.(interface{ Job() ([]byte, error) })
	if !ok {
		return flagSettingWords
	}
	raw, err := jdb.Job()
	if err != nil || raw == nil {
		return flagSettingWords
	}
	st, err := job.UnmarshalStored(raw)
	return wordsFor(err != nil || st.Flags)
}

// raiseBudget matches a message's advice to raise the answer budget, in
// the stages' plain words or as letters stored before them worded it
// (the flag, the job file's key, a job stage's bare key).
var raiseBudget = regexp.MustCompile("raise (?:--max-output-tokens|max_output_tokens in the job file|max_output_tokens|" +
	regexp.QuoteMeta(stages.MaxOutputTokensWords) + ")")

// budget is msg with its advice to raise the answer budget in w's words.
func (w settingWords) budget(msg string) string {
	return raiseBudget.ReplaceAllLiteralString(msg, "raise "+w.maxOutputTokens)
}

// word words a run's error that names a stage setting in w's words: an
// unknown model, or the first calls all stopped by the answer budget; any
// other error is returned as it is.
func (w settingWords) word(err error) error {
	var (
		nf   *stages.ModelNotFoundError
		same *pipeline.SameFailureError
	)
	switch {
	case errors.As(err, &nf):
		return &wordedError{err: err, msg: strings.Replace(err.Error(), "check "+stages.ModelWords, "check "+w.model, 1)}
	case errors.As(err, &same) && raiseBudget.MatchString(same.Cause):
		return &wordedError{err: err, msg: w.budget(err.Error())}
	}
	return err
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
