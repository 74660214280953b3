package cli

import (
	"errors"
	"strings"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The pipeline's stops (pipeline.QuotaStop, OutageStop, BudgetStop), and
// a batch client that cannot be made (batch.ClientError), carry their
// facts and say what to change in the domain's terms ("the longest wait
// allowed"); on the command line what to change is a flag, named here and
// nowhere below.

// quotaRemedies is the flag that changes each QuotaStop's bound.
var quotaRemedies = map[pipeline.QuotaCause]string{
	pipeline.WaitTooLong:    "raise --max-wait to wait for it",
	pipeline.RefusedInARow:  "or lower --ceiling",
	pipeline.RefusedTooLong: "give a longer --max-refused, or 0 to never stop for refusals",
}

// wordStops rewords the stop err carries, if any, with the flag to change.
func wordStops(err error) error {
	if err == nil {
		return nil
	}
	var (
		qs     *pipeline.QuotaStop
		os     *pipeline.OutageStop
		bs     *pipeline.BudgetStop
		ce     *batch.ClientError
		reason error
		text   string
	)
	switch {
	case errors.As(err, &qs):
		remedy, ok := quotaRemedies[qs.Cause]
		if !ok {
			return err
		}
		reason, text = qs, qs.Text(remedy)
	case errors.As(err, &os):
		if os.Overloaded {
			return err
		}
		reason, text = os, os.Text("--base-url")
	case errors.As(err, &bs):
		remedy := "raise --budget"
		if bs.Total {
			remedy = "raise --budget-total"
		}
		reason, text = bs, bs.Text(remedy)
	case errors.As(err, &ce):
		reason, text = ce, ce.Text("check --base-url and GEMINI_API_KEY")
	default:
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, reason.Error()) {
		return err
	}
	return &wordedError{err: err, msg: strings.Replace(msg, reason.Error(), text, 1)}
}

// wordedError is err with its message reworded for the command line; it
// is err for errors.Is and errors.As.
type wordedError struct {
	err error
	msg string
}

func (e *wordedError) Error() string { return e.msg }
func (e *wordedError) Unwrap() error { return e.err }
