package cli

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// A dead letter (its stage, class, reason and message), a run's record
// and a store's refusal are stored or returned with the facts, and a
// dead letter outlives the command that wrote it: the commands that deal
// with them are worded here, with the database they are about, when
// they are shown.

// oldDeadHint is the command a dead letter's message ended with when
// messages were stored with one (databases written before the CLI worded
// them): shown without it, since the next step printed beside it is the
// whole command.
var oldDeadHint = regexp.MustCompile("(?:; inspect it with `sawtooth dlq show`)?(?:,? then |: | \\()`sawtooth (?:retry --stage [^`]*|rerun)`\\)?$")

// deadMessage is a stored dead letter's message as shown: an old one
// without the command it ended with, the setting it names in w's words.
func deadMessage(d pipeline.DeadLetter, w settingWords) string {
	msg := d.Message
	if loc := oldDeadHint.FindStringIndex(msg); loc != nil && loc[0] > 0 {
		msg = msg[:loc[0]]
	}
	if deadCause(d) == stages.CauseOutputBudget {
		msg = w.budget(msg)
	}
	return msg
}

// oldClaimsStart is how the runner's claims-exhausted letter began
// when it was stored without a cause (databases written before
// pipeline.DeadCause).
var oldClaimsStart = regexp.MustCompile(`^claimed [0-9]+ times and never finished: the workers holding it died or lost their lease each time`)

// deadCause is why the runner dead-lettered d: its stored cause, or, for
// a letter stored before causes were, the one its message tells.
func deadCause(d pipeline.DeadLetter) pipeline.DeadCause {
	switch {
	case d.Cause != "":
		return d.Cause
	case oldClaimsStart.MatchString(d.Message):
		return pipeline.CauseClaimsExhausted
	case raiseBudget.MatchString(d.Message):
		return stages.CauseOutputBudget
	}
	return ""
}

// deadNextStep says what to do about the dead letter d of item id at stage
// in the database at db, naming settings in w's words: the commands,
// ready to copy.
func deadNextStep(db, stage, id string, d pipeline.DeadLetter, w settingWords) string {
	p, s, i := shellQuote(db), shellQuote(stage), shellQuote(id)
	requeue := fmt.Sprintf("  sawtooth dlq requeue --db %s --stage %s --id %s\n  sawtooth run --db %s\n", p, s, i, p)
	switch deadCause(d) {
	case pipeline.CauseClaimsExhausted:
		return "the workers holding it died or lost their lease each time: if the item is not what crashes them, re-queue it and run again:\n" + requeue
	case stages.CauseOutputBudget:
		return fmt.Sprintf("its answer did not fit the stage's output budget: raise %s, then re-queue it and run again:\n%s", w.maxOutputTokens, requeue)
	}
	switch {
	case d.Class == pipeline.ClassPermanent:
		return fmt.Sprintf("a permanent failure fails the same way if re-queued unchanged: edit the row in your input file and run again (the edited text re-enters by itself):\n"+
			"  sawtooth run --db %s --input FILE\nor, once the cause the message names is fixed, re-queue it and run again:\n%s", p, requeue)
	default:
		return "to try it again, re-queue it and run again:\n" + requeue
	}
}

// wordSameFailure words the runner's "first calls all failed the same
// way" stop with the command that re-queues its dead letters, once the
// cause is fixed; any other error is returned as it is.
func wordSameFailure(err error, db string) error {
	var same *pipeline.SameFailureError
	if !errors.As(err, &same) || same.DeadLettered == 0 {
		return err
	}
	return &wordedError{err: err, msg: fmt.Sprintf("%v: fix the cause, then re-queue them and run again:\n  sawtooth retry --db %s --stage %s",
		err, shellQuote(db), shellQuote(same.Stage))}
}

// wordNotDead words a store's refusal to re-queue an item that is not a
// dead letter of its stage with the command that lists them, in the
// database at db; any other error is returned as it is.
func wordNotDead(err error, db string) error {
	var nd *pipeline.NotDeadError
	if !errors.As(err, &nd) {
		return err
	}
	return &wordedError{err: err, msg: fmt.Sprintf("%v (see `sawtooth dlq list --db %s --stage %s`)", err, shellQuote(db), shellQuote(nd.Stage))}
}

// wordOldSchema words a read-only open's refusal of an older PostgreSQL
// schema with the command that upgrades it; any other error is returned
// as it is.
func wordOldSchema(err error, target string) error {
	var old *postgres.OldSchemaError
	if !errors.As(err, &old) {
		return err
	}
	return &wordedError{err: err, msg: fmt.Sprintf("%v: upgrade it with `sawtooth migrate --db %s` (a run also does)", err, shellQuote(postgres.Redact(target)))}
}
