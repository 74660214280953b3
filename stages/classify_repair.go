// This file holds the one repair call Process makes when an answer is cut
// off or off the schema: at temperature 0, asking the same request again
// gets the same answer, so the runner's retries would pay for it again and
// again.

package stages

import (
	"fmt"
	"math"
	"strings"
)

// repairKind says why an answer earns one more call. Its values are stored
// in ClassifyOutput.Repair.
type repairKind string

const (
	// repairCutOff: finishReason MAX_TOKENS, the JSON is cut off.
	repairCutOff repairKind = "cut_off"
	// repairOffSchema: the text is not the JSON object the schema asks
	// for (not JSON, a field missing, a label outside the set, a
	// confidence outside 0..1).
	repairOffSchema repairKind = "off_schema"
)

// request is what varies between the calls Process makes for one item.
type request struct {
	// maxOutputTokens is the answer budget, thinking included.
	maxOutputTokens int32
	// repairNote is appended to the system instruction; "" on the first
	// call.
	repairNote string
	// tier is the call's service tier and timeout (zero: standard, the
	// stage's timeout).
	tier tierCall
}

// firstRequest is the request every item starts with.
func (c *Classify) firstRequest() request {
	return request{maxOutputTokens: c.maxOutputTokens}
}

// repairRequest is the one repair call after first's answer failed as
// bad says: twice the output budget (the answer, or thinking, may simply
// need more) and an instruction saying what was wrong. The contents stay
// the same, so the request still reads as this item's.
func (c *Classify) repairRequest(first request, bad *stageError) request {
	budget := int32(min(2*int64(first.maxOutputTokens), math.MaxInt32))
	var note string
	switch bad.repair {
	case repairCutOff:
		note = fmt.Sprintf("Your previous answer to this review was %s before the JSON object was complete. "+
			"Answer with the JSON object only, and keep \"reason\" to one short sentence.", bad.problem)
	default:
		note = fmt.Sprintf("Your previous answer to this review did not match the required format (%s). "+
			"Answer with only a JSON object: \"label\" (exactly one of: %s), \"confidence\" (a number from 0 to 1) "+
			"and \"reason\" (one short sentence).", bad.problem, strings.Join(c.labels, ", "))
	}
	return request{maxOutputTokens: budget, repairNote: note}
}

// repairFailed explains an item whose answer was unusable on the first
// call and again on the repair call: asking again would pay for the same
// answer, so it goes to the dead letters with what a person can change.
func (c *Classify) repairFailed(first, second request, bad, again *stageError) error {
	if bad.repair == repairCutOff && again.repair == repairCutOff {
		return c.errs.errorf(again, "the answer was cut off at %d output tokens, and again at %d when asked once more (finishReason=MAX_TOKENS): "+
			"asking again gives the same answer; raise --max-output-tokens or lower the thinking budget, then `sawtooth retry --stage classify`",
			first.maxOutputTokens, second.maxOutputTokens)
	}
	what := fmt.Sprintf("first %s; after it was told what was wrong, %s", bad.problem, again.problem)
	if bad.problem == again.problem {
		what = bad.problem + ", and the same after it was told what was wrong"
	}
	return c.errs.errorf(again, "model output did not match the schema (%s): "+
		"asking again gives the same answer; check that the labels and the prompt template fit texts like this one, or edit the row in your input file and run again",
		what)
}
