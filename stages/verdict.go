package stages

import "github.com/sawtooth-dev/sawtooth/pipeline"

// VerdictError marks a permanent error as a verdict on one item's content:
// a safety block, a language the model does not support, a text that is
// empty. It is the item's fault and says nothing about the stage's
// configuration, so it must never count towards stopping a run because
// "every call failed the same way": a few hundred genuinely unsafe rows at
// the head of an input would otherwise stop every run.
//
// The runner recognises it without importing this package by its
// ItemVerdict method:
//
//	var v interface{ ItemVerdict() bool }
//	if errors.As(err, &v) && v.ItemVerdict() { ... }
//
// Errors that may come from the configuration instead (a 400 on the
// request, an answer cut off or off the schema twice, a prompt template
// that fails) are plain pipeline.Permanent errors, not verdicts.
var _ pipeline.ItemVerdict = (*VerdictError)(nil)

type VerdictError struct{ Err error }

// Error returns Err's message.
func (e *VerdictError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *VerdictError) Unwrap() error { return e.Err }

// ItemVerdict reports true: the error is a verdict on the item.
func (e *VerdictError) ItemVerdict() bool { return true }

// verdict wraps err as a permanent verdict on the item. verdict(nil) is nil.
func verdict(err error) error {
	if err == nil {
		return nil
	}
	return pipeline.Permanent(&VerdictError{Err: err})
}

// editRowHint is the advice for an item whose text earned a verdict: the
// same text earns the same verdict again, so re-queueing it is no use, and
// an edited row re-enters the pipeline on the next run.
const editRowHint = "edit the row in your input file and run again: the edited text re-enters by itself"

// blockHint is editRowHint for a verdict the API was paid for.
const blockHint = editRowHint + " (re-queueing the same text pays for the same block again)"
