package stages

// Names says how the user sets a stage's settings, for the messages the
// stage writes: "--max-output-tokens" on the command line,
// "max_output_tokens in the job file" from a job. The stage cannot word
// them itself: a dead letter's message is stored when it is written, and
// only the front end knows which of its settings it was. "" names the
// setting in plain words.
type Names struct {
	// Model is how to choose the model (LLMConfig.Model).
	Model string
	// MaxOutputTokens is how to raise the answer's budget
	// (LLMConfig.MaxOutputTokens).
	MaxOutputTokens string
}

func (n Names) withDefaults() Names {
	n.Model = orDefault(n.Model, "the stage's model")
	n.MaxOutputTokens = orDefault(n.MaxOutputTokens, "the stage's max output tokens")
	return n
}
