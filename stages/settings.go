package stages

import "github.com/sawtooth-dev/sawtooth/pipeline"

// A stage's messages name the settings that fix them in these plain
// words, never as a flag or a job file's key: a dead letter's message is
// stored when it is written and shown later, by a command run from flags
// or from a job file, and only the front end knows which it is (it
// words the setting when it shows the message).
const (
	// ModelWords names the stage's model (LLMConfig.Model).
	ModelWords = "the stage's model"
	// MaxOutputTokensWords names the stage's answer budget
	// (LLMConfig.MaxOutputTokens).
	MaxOutputTokensWords = "the stage's max output tokens"
)

// CauseOutputBudget: the item's answer was cut off at the stage's output
// budget (finishReason MAX_TOKENS), or did not fit its schema twice, and a
// larger budget may fix it; the message says so with
// MaxOutputTokensWords.
const CauseOutputBudget pipeline.DeadCause = "output-budget"

// ModelNotFoundError is the API's answer that the stage's model does not
// exist (a 404): every call fails alike, so it is pipeline.Fatal.
type ModelNotFoundError struct {
	// Model is the model the stage asked for.
	Model string
	// Err is the stage's error: the stage, the model, the base URL and
	// the API's status, and to check ModelWords.
	Err error
}

func (e *ModelNotFoundError) Error() string { return e.Err.Error() }
func (e *ModelNotFoundError) Unwrap() error { return e.Err }
