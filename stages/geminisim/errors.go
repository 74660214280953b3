package geminisim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// apiError is the body of every error answer, as the API sends it.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
	Details []any  `json:"details,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(`{"error":{"code":500,"message":"encode response","status":"INTERNAL"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	w.Write(body) //nolint:errcheck // the client may be gone
}

func writeError(w http.ResponseWriter, code int, status, msg string, details ...any) {
	writeJSON(w, code, map[string]apiError{"error": {Code: code, Message: msg, Status: status, Details: details}})
}

func writeBadKey(w http.ResponseWriter) {
	writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
		map[string]any{
			"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
			"reason":   "API_KEY_INVALID",
			"domain":   "googleapis.com",
			"metadata": map[string]string{"service": "generativelanguage.googleapis.com"},
		})
}

func writeNotFound(w http.ResponseWriter, model, method string) {
	writeError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf(
		"models/%s is not found for API version v1beta, or is not supported for %s. Call ListModels to see the list of available models and their supported methods.",
		model, method))
}

func writeOverloaded(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "The model is overloaded. Please try again later.")
}

// quotaNames are each quota's metric and id as the API reports them.
var quotaNames = map[quotaKind]struct{ metric, id string }{
	kindRPM: {"generativelanguage.googleapis.com/generate_requests_per_model", "GenerateRequestsPerMinutePerProjectPerModel"},
	kindTPM: {"generativelanguage.googleapis.com/generate_content_input_token_count", "GenerateContentInputTokensPerModelPerMinute"},
	kindRPD: {"generativelanguage.googleapis.com/generate_requests_per_model_per_day", "GenerateRequestsPerDayPerProjectPerModel"},
}

// writeCapacity is the bare 429 of a server out of capacity: no details,
// so no quotaId and no RetryInfo.
func writeCapacity(w http.ResponseWriter) {
	writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).")
}

// writeNoCredits is the API's answer once the account's prepayment
// credits are spent: a 429 with no details, no quota named, no retry
// delay, and a message that is the only clue.
func writeNoCredits(w http.ResponseWriter) {
	writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing.")
}

// writeRateLimited writes a quota 429 the way the API does, its details
// shaped by the RetryInfo and QuotaFailure modes.
func writeRateLimited(w http.ResponseWriter, model string, vs []violation, delay time.Duration, ri RetryInfoMode, qf QuotaFailureMode) {
	help := map[string]any{
		"@type": "type.googleapis.com/google.rpc.Help",
		"links": []map[string]string{{
			"description": "Learn more about Gemini API quotas",
			"url":         "https://ai.google.dev/gemini-api/docs/rate-limits",
		}},
	}
	var retry []any
	if ri != RetryAbsent {
		retry = append(retry, map[string]any{
			"@type":      "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": formatDuration(delay),
		})
	}
	if qf == QuotaFailureAbsent {
		writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Resource exhausted, please try again later.", retry...)
		return
	}
	var msg strings.Builder
	msg.WriteString("You exceeded your current quota, please check your plan and billing details. " +
		"For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. " +
		"To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. ")
	violations := make([]map[string]any, 0, len(vs))
	for _, v := range vs {
		n := quotaNames[v.kind]
		fmt.Fprintf(&msg, "\n* Quota exceeded for metric: %s, limit: %d, model: %s", n.metric, v.limit, model)
		viol := map[string]any{
			"quotaMetric":     n.metric,
			"quotaId":         n.id,
			"quotaDimensions": map[string]string{"location": "global", "model": model},
		}
		if qf != QuotaFailureNoValue {
			viol["quotaValue"] = strconv.Itoa(v.limit)
		}
		violations = append(violations, viol)
	}
	if ri != RetryAbsent {
		fmt.Fprintf(&msg, "\nPlease retry in %s.", strconv.FormatFloat(delay.Seconds(), 'f', -1, 64)+"s")
	}
	details := append([]any{
		map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": violations},
		help,
	}, retry...)
	writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", msg.String(), details...)
}
