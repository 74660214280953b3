// This file gives the batch mode the online path's request and answer
// checks: a batch request is the request Process sends first, and a batch
// answer is judged by Decode, so an answer means the same whichever way it
// was asked.

package stages

import (
	"fmt"
	"net/http"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// BatchRequest returns the request Process would send first for it, as a
// batch job's inlined request: the same model, contents, system
// instruction, schema and budgets. The caller sets Metadata (the item's
// key), and commits without a request an item the stage's condition
// leaves out (see Skip). An item Process would refuse without a call (a
// condition that fails on it, an empty text or prompt, a prompt template
// failing on it) gets the same classified error.
func (l *LLM) BatchRequest(it pipeline.Item) (*genai.InlinedRequest, error) {
	if l.when != nil {
		// A condition that cannot be read on the item fails it without
		// a call, as Process does; never a paid request instead.
		if _, err := l.when.Match(it); err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
	}
	prompt, err := l.render(it)
	if err != nil {
		return nil, err
	}
	cfg := l.requestConfig(l.firstRequest())
	// Per-call HTTP options and the SDK's continuation loop mean nothing
	// inside a batch job; a nil Headers map is what makes the SDK write.
	cfg.HTTPOptions = nil
	cfg.AutomaticContinuation = nil
	return &genai.InlinedRequest{Model: l.model, Contents: genai.Text(prompt), Config: cfg}, nil
}

// DecodeBatch judges one batch answer for it exactly as Decode judges an
// online one. rowErr is the request's error status (a google.rpc.Status
// with a gRPC code, or an HTTP code) when the job answered it with one: it
// is read as the API error the online call would have got (UNAVAILABLE as
// 503, RESOURCE_EXHAUSTED as 429, INVALID_ARGUMENT as 400...), so it gets
// the same class. An answer the online path would repair with a second
// call (cut off, off the schema) is transient here: the batch mode has no
// second call, and the online path repairs it.
func (l *LLM) DecodeBatch(it pipeline.Item, resp *genai.GenerateContentResponse, rowErr *genai.JobError) (pipeline.Result, error) {
	var callErr error
	if rowErr != nil {
		code := 0
		if rowErr.Code != nil {
			code = int(*rowErr.Code)
		}
		hc, status := rpcToHTTP(code)
		callErr = genai.APIError{Code: hc, Status: status, Message: rowErr.Message}
	} else if resp == nil {
		callErr = genai.APIError{Code: http.StatusInternalServerError, Status: "INTERNAL", Message: "the batch job returned neither a response nor an error for this request"}
	}
	res, err := l.Decode(resp, callErr)
	if err != nil {
		return res, fmt.Errorf("item %s (batch): %w", itemRef(it), err)
	}
	return res, nil
}

// rpcToHTTP maps a google.rpc.Code to the HTTP status the API sends with
// it. A code that already is an HTTP status (>= 100) is kept.
func rpcToHTTP(code int) (int, string) {
	if code >= 100 {
		return code, ""
	}
	switch code {
	case 1:
		return 499, "CANCELLED"
	case 3:
		return http.StatusBadRequest, "INVALID_ARGUMENT"
	case 4:
		return http.StatusGatewayTimeout, "DEADLINE_EXCEEDED"
	case 5:
		return http.StatusNotFound, "NOT_FOUND"
	case 7:
		return http.StatusForbidden, "PERMISSION_DENIED"
	case 8:
		return http.StatusTooManyRequests, "RESOURCE_EXHAUSTED"
	case 9:
		return http.StatusBadRequest, "FAILED_PRECONDITION"
	case 14:
		return http.StatusServiceUnavailable, "UNAVAILABLE"
	case 16:
		return http.StatusUnauthorized, "UNAUTHENTICATED"
	default:
		return http.StatusInternalServerError, "INTERNAL"
	}
}
