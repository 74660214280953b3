// This file maps what the genai SDK and the HTTP layer report (APIError,
// transport failures, undecodable bodies) to pipeline error classes, and
// writes the messages a user reads: short, key-free, naming what to do.

package stages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// geminiErrors maps what one LLM stage's calls report to pipeline error
// classes and writes the messages its user reads, each naming the stage.
// It is read-only once built, so safe for concurrent use.
type geminiErrors struct {
	stage   string        // the stage's name, which starts every message
	apiKey  string        // kept only to scrub it from messages
	baseURL string        // as resolved by the SDK
	model   string        // the model requests are sent to
	timeout time.Duration // the stage's request timeout
	// badKey says what to do about a rejected key: Vertex AI has none.
	badKey string
}

// newGeminiErrors is the error mapping of a stage named stage calling
// model at client's base URL.
func newGeminiErrors(stage string, client *genai.Client, e Endpoint, model string, timeout time.Duration) *geminiErrors {
	g := &geminiErrors{stage: stage, apiKey: e.APIKey, model: model, timeout: timeout,
		baseURL: strings.TrimRight(client.ClientConfig().HTTPOptions.BaseURL, "/"),
		badKey:  "set GEMINI_API_KEY to a valid key (https://aistudio.google.com/apikey)"}
	if e.ResolvedBackend() == BackendVertex {
		g.badKey = "check the Vertex AI credentials (gcloud auth application-default login)"
	}
	return g
}

var errSDKPanic = errors.New("the genai SDK could not decode the response body")

// withHTTPStatus gives the response's HTTP status to an APIError whose
// body carried no code or another one, e.g. {"error":{}} or
// {"error":{"code":1}} from a proxy: the SDK takes the code from the body
// only, and a 429 (or a 401) without the right one would be classified as
// an unexpected answer, retried as transient and dead-lettered after its
// budget instead of waiting (or stopping the run). The status line is
// what happened on the wire, so it wins.
func withHTTPStatus(err error, status int) error {
	var ae genai.APIError
	if status < 400 || !errors.As(err, &ae) || ae.Code == status {
		return err
	}
	ae.Code = status
	if ae.Status == "" {
		ae.Status = fmt.Sprintf("%d %s", status, http.StatusText(status))
	}
	return ae
}

// callError classes an error GenerateContent returned: an API error
// response, a timeout, an over-size or undecodable body, or a transport
// failure.
func (e *geminiErrors) callError(err error) error {
	var ae genai.APIError
	if errors.As(err, &ae) {
		return e.apiError(err, ae)
	}
	var tooLarge *bodyTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		// Transient: a proxy's error page or a broken server, not this
		// item; the runner retries within its budget.
		return e.errorf(err, "the answer from %s is larger than %d MiB, which no Gemini answer is: it was not read (a wrong base URL, or a proxy or server fault)", e.baseURL, tooLarge.max>>20)
	case errors.Is(err, context.Canceled):
		return e.errorf(err, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return e.errorf(err, "no complete answer from %s within %s: the API is slow or overloaded (if this persists, raise the request timeout)", e.baseURL, e.timeout)
	case errors.Is(err, errSDKPanic):
		return e.errorf(err, "the API's answer could not be decoded (%s)", e.short(err.Error(), 200))
	case isJSONError(err):
		// The SDK's message is its own prefix, the JSON error and then the
		// whole body: keep the error and the body's start.
		msg, body, _ := strings.Cut(err.Error(), "\n")
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		return e.errorf(err, "the answer from %s is not valid JSON (%s; it starts %q): the body was cut off or malformed", e.baseURL, msg, e.short(body, 60))
	default:
		// A transport failure: the SDK wraps the *url.Error that already
		// names the method and URL; its cause is what the user needs
		// ("dial tcp ...: connection refused", "EOF").
		cause := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) && ue.Err != nil {
			cause = ue.Err.Error()
		}
		wrapped := e.errorf(err, "calling %s: %s", e.baseURL, e.short(cause, 300))
		// No connection at all (refused, no route, DNS): the request never
		// reached the API, so it says nothing about this item.
		var oe *net.OpError
		var de *net.DNSError
		if (errors.As(err, &oe) && oe.Op == "dial") || errors.As(err, &de) {
			return pipeline.Unavailable(wrapped)
		}
		return wrapped
	}
}

// isJSONError reports a response body the SDK could not parse as JSON.
func isJSONError(err error) bool {
	var (
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	return errors.As(err, &se) || errors.As(err, &ute)
}

// apiError classes an error response by its HTTP code, status and
// google.rpc details.
func (e *geminiErrors) apiError(err error, ae genai.APIError) error {
	status := strings.TrimSpace(ae.Status)
	what := strconv.Itoa(ae.Code)
	switch {
	case status == "":
	case strings.HasPrefix(status, what):
		what = status // a non-JSON body: Status is the HTTP status line
	default:
		what += " " + status
	}
	msg := e.short(ae.Message, 300)
	reason, delay, daily, quotas := detailsOf(ae.Details)
	if reason != "" {
		what += ", " + reason
	}
	refused := ae.Code == http.StatusTooManyRequests || strings.EqualFold(status, "RESOURCE_EXHAUSTED")
	switch {
	case (refused || ae.Code == http.StatusForbidden) && len(quotas) == 0 && isBillingRefusal(ae.Message, reason):
		// No quota, and waiting clears nothing: retried, one call every
		// few seconds at the limiter's floor would go on all night.
		return pipeline.Halt(e.errorf(err, "the account cannot pay for calls (%s: %s): no call will succeed until it can; add credits or enable billing for the API key's project, then run again to resume", what, msg))
	case refused:
		if daily {
			quotas = slices.DeleteFunc(quotas, func(id string) bool { return !isDaily(id) })
		}
		q := ""
		if len(quotas) > 0 {
			q = " on " + strings.Join(quotas, ", ")
		}
		if daily {
			return pipeline.RateLimited(e.errorf(err, "the daily quota is exhausted (%s%s): nothing will succeed until it resets at midnight Pacific time; run again then to continue where this run stopped", what, q), delay, true)
		}
		after := ""
		if delay > 0 {
			after = ", retry after " + delay.String()
		}
		rpm, tpm := perMinuteBudgets(ae.Details)
		return &pipeline.RateLimitedError{
			Err:        e.errorf(err, "rate limited (%s%s%s): %s", what, q, after, msg),
			RetryAfter: delay, RequestsPerMinute: rpm, TokensPerMinute: tpm,
		}
	case ae.Code == http.StatusUnauthorized || reason == "API_KEY_INVALID" || strings.Contains(ae.Message, "API key not valid"):
		return pipeline.Fatal(e.errorf(err, "the API key was rejected (%s): %s", what, e.badKey))
	case ae.Code == http.StatusForbidden:
		return pipeline.Fatal(e.errorf(err, "permission denied (%s: %s): check that GEMINI_API_KEY is right and its project has the Generative Language API enabled and access to model %q", what, msg, e.model))
	case ae.Code == http.StatusNotFound:
		return pipeline.Fatal(&ModelNotFoundError{Model: e.model,
			Err: e.errorf(err, "model %q not found at %s (%s): check %s (e.g. %s)", e.model, e.baseURL, what, ModelWords, DefaultModel)})
	case ae.Code == http.StatusBadRequest && strings.EqualFold(status, "FAILED_PRECONDITION"):
		return pipeline.Fatal(e.errorf(err, "the API refuses requests from this account (%s: %s): fix the account (region, billing), then run again", what, msg))
	case ae.Code == http.StatusServiceUnavailable || strings.EqualFold(status, "UNAVAILABLE"):
		// "The model is overloaded": capacity, not quota and not the
		// item; the runner waits it out without spending an attempt.
		return pipeline.Overloaded(e.errorf(err, "server overloaded (%s: %s)", what, msg))
	case ae.Code == http.StatusRequestTimeout || ae.Code == 499 || ae.Code >= 500:
		return e.errorf(err, "server error (%s: %s)", what, msg)
	case ae.Code >= 400:
		return pipeline.Permanent(e.errorf(err, "the API rejected this item's request (%s: %s): fix the prompt template, or edit the row in your input file and run again (the edited text re-enters by itself)", what, msg))
	default:
		return e.errorf(err, "unexpected answer (%s: %s)", what, msg)
	}
}

// billingRefusal matches what the API says when the account, not a quota,
// refuses a call: prepayment credits depleted, credits exhausted, billing
// not enabled, a billing account closed or missing. Gemini's quota 429s say
// "please check your plan and billing details", which must not match: so
// "billing" alone is not enough, nor "exhausted" without "credit".
var billingRefusal = regexp.MustCompile(`(?i)` +
	`prepay|` +
	`\bcredits?\b[^.]{0,40}?\b(deplet|exhaust|used up|run out|ran out|insufficient|too low|expired|no longer)|` +
	`\b(deplet\w*|exhaust\w*|used up|run out of|ran out of|insufficient|out of|no( remaining)?)\s+(\w+\s+){0,2}?credits?\b|` +
	`\bbilling\b[^.]{0,20}?\b(account|disabled|not enabled|not active|inactive|must be enabled|to be enabled|is required|suspended)|` +
	`\benabl\w*\s+billing\b`)

// isBillingRefusal reports a refusal for the account's billing or credits,
// from the error's message or ErrorInfo's reason (BILLING_DISABLED).
func isBillingRefusal(message, reason string) bool {
	return strings.Contains(strings.ToUpper(reason), "BILLING") || billingRefusal.MatchString(strings.Join(strings.Fields(message), " "))
}

// detailsOf reads the google.rpc details of an API error: ErrorInfo's
// reason, RetryInfo's delay, and QuotaFailure's quota ids (daily is true if
// any is a per-day quota).
func detailsOf(details []map[string]any) (reason string, delay time.Duration, daily bool, quotas []string) {
	for _, d := range details {
		typ, _ := d["@type"].(string)
		switch {
		case strings.HasSuffix(typ, "google.rpc.ErrorInfo"):
			if r, ok := d["reason"].(string); ok && reason == "" {
				reason = r
			}
		case strings.HasSuffix(typ, "google.rpc.RetryInfo"):
			delay = retryDelay(d["retryDelay"])
		case strings.HasSuffix(typ, "google.rpc.QuotaFailure"):
			vs, _ := d["violations"].([]any)
			for _, v := range vs {
				m, _ := v.(map[string]any)
				id, _ := m["quotaId"].(string)
				if id == "" {
					continue
				}
				quotas = append(quotas, id)
				daily = daily || isDaily(id)
			}
		}
	}
	return reason, delay, daily, quotas
}

// perMinuteBudgets reads the per-minute budgets QuotaFailure names with a
// quotaValue: requests per minute and input tokens per minute (the lowest
// of each when several violations name one), 0 for each none names. The
// window is in quotaId ("...PerMinute..."), the unit in quotaId or
// quotaMetric ("...InputTokens...", "..._requests").
func perMinuteBudgets(details []map[string]any) (rpm, tpm int64) {
	for _, d := range details {
		if typ, _ := d["@type"].(string); !strings.HasSuffix(typ, "google.rpc.QuotaFailure") {
			continue
		}
		vs, _ := d["violations"].([]any)
		for _, v := range vs {
			m, _ := v.(map[string]any)
			id, _ := m["quotaId"].(string)
			metric, _ := m["quotaMetric"].(string)
			id, metric = strings.ToLower(id), strings.ToLower(metric)
			value := quotaValue(m["quotaValue"])
			if value <= 0 || !strings.Contains(id, "perminute") {
				continue
			}
			lowest := func(cur int64) int64 {
				if cur == 0 {
					return value
				}
				return min(cur, value)
			}
			switch {
			case strings.Contains(id, "token") || strings.Contains(metric, "token"):
				tpm = lowest(tpm)
			case strings.Contains(id, "request") || strings.Contains(metric, "request"):
				rpm = lowest(rpm)
			}
		}
	}
	return rpm, tpm
}

// quotaValue reads QuotaFailure's quotaValue: an int64 in its JSON form
// (a string), or a number from a proxy; 0 if neither.
func quotaValue(v any) int64 {
	switch v := v.(type) {
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err == nil {
			return n
		}
	case float64:
		if v >= 1 && v < 1e15 {
			return int64(v)
		}
	}
	return 0
}

// isDaily reports a per-day quota id, e.g.
// "GenerateRequestsPerDayPerProjectPerModel-FreeTier".
func isDaily(quotaID string) bool {
	return strings.Contains(strings.ToLower(quotaID), "perday")
}

// retryDelay reads a protobuf Duration in its JSON form ("45.837906927s"),
// or the {"seconds", "nanos"} object some proxies send.
func retryDelay(v any) time.Duration {
	switch v := v.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err == nil && d > 0 {
			return d
		}
	case map[string]any:
		var secs, nanos float64
		switch s := v["seconds"].(type) {
		case float64:
			secs = s
		case string:
			secs, _ = strconv.ParseFloat(s, 64)
		}
		nanos, _ = v["nanos"].(float64)
		if d := time.Duration(secs*float64(time.Second) + nanos); d > 0 && secs < 1e9 {
			return d
		}
	}
	return 0
}

// stageError carries a message written for the user (short, key-free)
// while Unwrap keeps the cause for errors.Is and errors.As.
type stageError struct {
	msg string
	err error
	// repair is why the answer earns one more call (see
	// LLM.answer); "" for every other error.
	repair repairKind
	// problem says what was wrong with the answer, for the repair call's
	// instruction.
	problem string
	// badAnswer: the server answered with nothing usable (see
	// pipeline.AnswerFault).
	badAnswer bool
	// cause is why the item is dead-lettered, when the error is one whose
	// fix is a setting (see pipeline.DeadCauser); "" otherwise.
	cause pipeline.DeadCause
}

func (e *stageError) Error() string                 { return e.msg }
func (e *stageError) Unwrap() error                 { return e.err }
func (e *stageError) AnswerFault() bool             { return e.badAnswer }
func (e *stageError) DeadCause() pipeline.DeadCause { return e.cause }

var (
	_ pipeline.AnswerFault = (*stageError)(nil)
	_ pipeline.DeadCauser  = (*stageError)(nil)
)

// errorf builds a stageError whose message names the stage and is
// redacted as a whole, which catches the key wherever an argument put it.
// Arguments that may be long (server messages, bodies, model output) must
// already be cut with e.short, which redacts before it cuts.
func (e *geminiErrors) errorf(cause error, format string, args ...any) error {
	return &stageError{msg: redact(e.stage+": "+fmt.Sprintf(format, args...), e.apiKey), err: cause}
}

// unusable is errorf for an answer with nothing usable in it (no
// candidates, say): retried as transient, counted apart from 5xx.
func (e *geminiErrors) unusable(format string, args ...any) error {
	se := e.errorf(nil, format, args...).(*stageError)
	se.badAnswer = true
	return se
}

// repairable is errorf for an answer the stage asks again for, once:
// problem tells the model what was wrong.
func (e *geminiErrors) repairable(kind repairKind, problem, format string, args ...any) error {
	se := e.errorf(nil, format, args...).(*stageError)
	se.repair, se.problem = kind, e.short(problem, 200)
	if kind == repairCutOff {
		se.cause = CauseOutputBudget // stored when no repair call follows (a batch answer)
	}
	return se
}

// outputBudget is errorf for an answer a larger output budget may fix
// (CauseOutputBudget).
func (e *geminiErrors) outputBudget(cause error, format string, args ...any) error {
	se := e.errorf(cause, format, args...).(*stageError)
	se.cause = CauseOutputBudget
	return se
}

// short is clip(s, n, e.apiKey): s on one line, key-free, at most n bytes
// plus "...".
func (e *geminiErrors) short(s string, n int) string { return clip(s, n, e.apiKey) }

// redactMark replaces every secret redact finds.
const redactMark = "[REDACTED]"

// minKeyFragment is the shortest run of the key's bytes redact removes
// when the key is not there whole (a server or proxy that cut its echo of
// the key): shorter runs match ordinary words too often and reveal too
// little of a key to matter.
const minKeyFragment = 8

// keyShaped matches a Google API key ("AIza" and 35 URL-safe characters),
// or what is left of one cut short: another project's key echoed by a
// proxy is as secret as ours.
var keyShaped = regexp.MustCompile(`AIza[0-9A-Za-z_\-]{4,}`)

// redact removes key from s: the whole key, every run of at least
// minKeyFragment bytes that also occurs in key (a cut echo of it), and
// anything shaped like a Google API key. It runs in time linear in len(s).
func redact(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, redactMark)
	}
	if len(key) >= minKeyFragment && len(s) >= minKeyFragment {
		grams := make(map[string]bool, len(key))
		for i := 0; i+minKeyFragment <= len(key); i++ {
			grams[key[i:i+minKeyFragment]] = true
		}
		var covered []bool // covered[i]: s[i] is part of a fragment of key
		for i := 0; i+minKeyFragment <= len(s); i++ {
			if grams[s[i:i+minKeyFragment]] {
				if covered == nil {
					covered = make([]bool, len(s))
				}
				for j := i; j < i+minKeyFragment; j++ {
					covered[j] = true
				}
			}
		}
		if covered != nil {
			var b strings.Builder
			for i := 0; i < len(s); i++ {
				switch {
				case !covered[i]:
					b.WriteByte(s[i])
				case i == 0 || !covered[i-1]:
					b.WriteString(redactMark)
				}
			}
			s = b.String()
		}
	}
	return keyShaped.ReplaceAllLiteralString(s, redactMark)
}

// clip returns s on one line with key redacted, cut to at most n bytes at
// a rune boundary ("..." marks a cut). It redacts before it cuts: a cut
// through the key would leave a fragment that no longer matches it.
// Only a prefix of s can ever be shown, so the rest is dropped first and
// the cost does not grow with s; the prefix is long enough that even if
// every byte of it were key, shrunk to redactMark, what remains past n
// is whole keys redacted, not a cut one.
func clip(s string, n int, key string) string {
	s = strings.Join(strings.Fields(s), " ")
	keyLen := max(len(key), 39)
	s, cutEarly := cutRunes(s, n*(keyLen/len(redactMark)+1)+2*keyLen)
	s, cut := cutRunes(redact(s, key), n)
	if cut || cutEarly {
		s += "..."
	}
	return s
}

// cutRunes cuts s to at most n bytes at a rune boundary and reports
// whether it cut.
func cutRunes(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}
