package stages

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// sentRequest is what the fake server saw of one generateContent request.
type sentRequest struct {
	user, system    string
	maxOutputTokens int
}

// scriptedGemini answers the n-th request with replies[n] (the last one
// once they run out) and keeps every request.
func scriptedGemini(t *testing.T, replies ...func(http.ResponseWriter, *http.Request, []byte)) (*fakeGemini, func() []sentRequest) {
	t.Helper()
	var (
		mu   sync.Mutex
		sent []sentRequest
	)
	srv := newFakeGemini(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req struct {
			Contents []struct {
				Parts []struct{ Text string } `json:"parts"`
			} `json:"contents"`
			SystemInstruction struct {
				Parts []struct{ Text string } `json:"parts"`
			} `json:"systemInstruction"`
			GenerationConfig struct {
				MaxOutputTokens int `json:"maxOutputTokens"`
			} `json:"generationConfig"`
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Contents) != 1 || len(req.SystemInstruction.Parts) != 1 {
			reply(400, body400)(w, r, body)
			return
		}
		mu.Lock()
		n := len(sent)
		sent = append(sent, sentRequest{
			user:            req.Contents[0].Parts[0].Text,
			system:          req.SystemInstruction.Parts[0].Text,
			maxOutputTokens: req.GenerationConfig.MaxOutputTokens,
		})
		mu.Unlock()
		replies[min(n, len(replies)-1)](w, r, body)
	})
	return srv, func() []sentRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]sentRequest(nil), sent...)
	}
}

// TestClassify_Repair checks a cut-off or off-schema answer is asked for
// once more, with twice the output budget and an instruction saying what
// was wrong, and never a third time: a second unusable answer is a
// permanent error, so the runner dead-letters the item instead of paying
// for the same answer --max-attempts times.
func TestClassify_Repair(t *testing.T) {
	one := pipeline.Usage{PromptTokens: 11, CandidateTokens: 5, TotalTokens: 16}
	good := reply(200, answer(`{"label":"bug","confidence":0.9,"reason":"crashes"}`, "STOP"))
	cutOff := reply(200, answer(`{"label":"bu`, "MAX_TOKENS"))
	offSchema := reply(200, answer(`{"label":"crash","confidence":0.9,"reason":"x"}`, "STOP"))
	for _, tc := range []struct {
		name    string
		replies []func(http.ResponseWriter, *http.Request, []byte)
		calls   int
		class   pipeline.Class // "" means success
		repair  string         // ClassifyOutput.Repair on success
		note    string         // in the repair call's system instruction
		msg     []string       // in the error
		usage   pipeline.Usage
		verdict bool // the error is a verdict on the item (VerdictError)
		// cause is the error's pipeline.CauseOf: the one a dead letter stores.
		cause pipeline.DeadCause
		// unbilled is the requests sent that were not billed (a 503).
		unbilled int
	}{
		{name: "good at once", replies: fns(good), calls: 1, usage: one},
		{name: "cut off, then good", replies: fns(cutOff, good), calls: 2, repair: "cut_off", usage: one.Add(one),
			note: "was cut off at 256 output tokens before the JSON object was complete"},
		{name: "off the schema, then good", replies: fns(offSchema, good), calls: 2, repair: "off_schema", usage: one.Add(one),
			note: `did not match the required format (label "crash" is not one of bug, feature_request, pricing, ux, praise, other)`},
		{name: "cut off twice", replies: fns(cutOff, cutOff, good), calls: 2, class: pipeline.ClassPermanent, usage: one.Add(one),
			note: "cut off", msg: []string{"cut off at 256 output tokens, and again at 512", "raise the stage's max output tokens"}, cause: CauseOutputBudget},
		{name: "off the schema twice", replies: fns(offSchema, offSchema, good), calls: 2, class: pipeline.ClassPermanent, usage: one.Add(one),
			note: "did not match", msg: []string{`label "crash" is not one of`, "and the same after it was told what was wrong", "edit the row in your input file"}},
		{name: "cut off, then off the schema", replies: fns(cutOff, offSchema, good), calls: 2, class: pipeline.ClassPermanent, usage: one.Add(one),
			note: "cut off", msg: []string{"first cut off at 256 output tokens; after it was told what was wrong, label"}},
		{name: "cut off, then a 503", replies: fns(cutOff, reply(503, body503), good), calls: 2, class: pipeline.ClassOverloaded, usage: one, unbilled: 1,
			note: "cut off", msg: []string{"503 UNAVAILABLE"}},
		{name: "off the schema, then a safety block", replies: fns(offSchema, reply(200, answer("", "SAFETY")), good), calls: 2,
			class: pipeline.ClassPermanent, usage: one.Add(one), note: "did not match", msg: []string{"safety filter"}, verdict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, sent := scriptedGemini(t, tc.replies...)
			c := newTestClassify(t, srv.srv.URL)
			res, err := c.Process(context.Background(), testItem("r1", "The app crashes when I log in"))
			if got := pipeline.CauseOf(err); got != tc.cause {
				t.Errorf("cause = %q, want %q", got, tc.cause)
			}

			reqs := sent()
			if len(reqs) != tc.calls {
				t.Fatalf("server saw %d requests, want %d", len(reqs), tc.calls)
			}
			if res.Usage != tc.usage {
				t.Errorf("Usage = %+v, want %+v (every call is billed)", res.Usage, tc.usage)
			}
			// The runner counts every request sent, a repair too, and
			// those billed (Result.Calls, a zero meaning one).
			if calls := max(res.Calls, 1); calls != tc.calls || (res.Calls > 0 && res.BilledCalls != tc.calls-tc.unbilled) {
				t.Errorf("Result says %d calls, %d billed; the server saw %d, %d billed", res.Calls, res.BilledCalls, tc.calls, tc.calls-tc.unbilled)
			}
			if reqs[0].maxOutputTokens != DefaultMaxOutputTokens || reqs[0].system != DefaultSystemInstruction(DefaultLabels) {
				t.Errorf("first request: budget %d, system %q", reqs[0].maxOutputTokens, reqs[0].system)
			}
			if tc.calls == 2 {
				r := reqs[1]
				if r.user != reqs[0].user {
					t.Errorf("repair call changed the contents: %q, then %q", reqs[0].user, r.user)
				}
				if r.maxOutputTokens != 2*DefaultMaxOutputTokens {
					t.Errorf("repair call budget %d, want %d", r.maxOutputTokens, 2*DefaultMaxOutputTokens)
				}
				if !strings.HasPrefix(r.system, reqs[0].system) || !strings.Contains(r.system, tc.note) {
					t.Errorf("repair call system instruction %q, want the original plus a note with %q", r.system, tc.note)
				}
			}
			if tc.class == "" {
				if err != nil {
					t.Fatalf("Process: %v", err)
				}
				var out ClassifyOutput
				if err := json.Unmarshal(res.Output, &out); err != nil {
					t.Fatal(err)
				}
				if out.Label != "bug" || out.Repair != tc.repair || out.Usage != tc.usage {
					t.Errorf("output %+v, want label bug, repair %q, usage %+v", out, tc.repair, tc.usage)
				}
				return
			}
			if got := pipeline.ClassOf(context.Background(), err); got != tc.class {
				t.Errorf("class %q, want %q: %v", got, tc.class, err)
			}
			// Twice cut off or off the schema may be the configuration's
			// fault (a budget too small for every item): not a verdict,
			// so the runner's same-failure stop can still catch it.
			if got := isItemVerdict(err); got != tc.verdict {
				t.Errorf("item verdict = %v, want %v: %v", got, tc.verdict, err)
			}
			for _, w := range tc.msg {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v lacks %q", err, w)
				}
			}
		})
	}
}

func fns(fs ...func(http.ResponseWriter, *http.Request, []byte)) []func(http.ResponseWriter, *http.Request, []byte) {
	return fs
}
