package stages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// googleShapedKey looks like a real Gemini key: "AIza" and 35 more.
const googleShapedKey = "AIzaSyD4f5G6h7J8k9L0zXcVbNmQwErTyUiOpAs"

// keyFragments returns every substring of key at least n bytes long that
// occurs in s.
func keyFragments(s, key string, n int) []string {
	var found []string
	for i := 0; i+n <= len(key); i++ {
		if strings.Contains(s, key[i:i+n]) {
			found = append(found, key[i:i+n])
		}
	}
	return found
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name, in, key, want string
	}{
		{"no key", "server error (500 INTERNAL)", googleShapedKey, "server error (500 INTERNAL)"},
		{"whole key", "key " + googleShapedKey + " rejected", googleShapedKey, "key [REDACTED] rejected"},
		{"head of the key, cut by the server", "key " + googleShapedKey[:20] + "...", googleShapedKey, "key [REDACTED]..."},
		{"tail of the key", "key ..." + googleShapedKey[25:] + " end", googleShapedKey, "key ...[REDACTED] end"},
		{"middle of a non-Google key", "k=ey-S3CRET-0123 x", testKey, "k=[REDACTED] x"},
		{"another project's key", "proxy saw AIzaSyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", testKey, "proxy saw [REDACTED]"},
		{"a cut Google-shaped key", "proxy saw AIzaSyAAAA", testKey, "proxy saw [REDACTED]"},
		{"a run shorter than a fragment stays", "test-ke is not the key", testKey, "test-ke is not the key"},
		{"no key configured", "nothing to hide", "", "nothing to hide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redact(tc.in, tc.key); got != tc.want {
				t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short stays", "a  b\n c", 10, "a b c"},
		{"cut at a rune boundary", "héllo", 2, "h..."},
		{"key redacted before the cut", strings.Repeat("x", 8) + googleShapedKey, 12, "xxxxxxxx[RED..."},
		{"huge input, key past the cut", strings.Repeat("y ", 1<<20) + googleShapedKey, 5, "y y y..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clip(tc.in, tc.n, googleShapedKey); got != tc.want {
				t.Errorf("clip = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestClassify_KeyEchoedAtEveryOffset has a server echo the key at every
// byte offset around where messages are cut: no part of the key may reach
// the error (which the dead letter and `dlq list` show).
func TestClassify_KeyEchoedAtEveryOffset(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to int // offsets of the key in the server's text
		respond  func(w http.ResponseWriter, prefix string)
	}{
		{
			name: "error message, cut at 300", from: 250, to: 300,
			respond: func(w http.ResponseWriter, prefix string) {
				reply(400, fmt.Sprintf(`{"error":{"code":400,"message":"%s%s trailing words","status":"INVALID_ARGUMENT"}}`, prefix, googleShapedKey))(w, nil, nil)
			},
		},
		{
			name: "plain-text 500 body, cut at 300", from: 250, to: 300,
			respond: func(w http.ResponseWriter, prefix string) {
				reply(500, prefix+googleShapedKey+" trailing words")(w, nil, nil)
			},
		},
		{
			name: "model output off the schema, cut at 120", from: 90, to: 125,
			respond: func(w http.ResponseWriter, prefix string) {
				reply(200, answer(prefix+googleShapedKey+" trailing words", "STOP"))(w, nil, nil)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var offset atomic.Int64
			srv := newFakeGemini(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				tc.respond(w, strings.Repeat("x", int(offset.Load())))
			})
			c := newTestClassify(t, srv.srv.URL, func(cfg *ClassifyConfig) { cfg.APIKey = googleShapedKey })
			for off := tc.from; off <= tc.to; off++ {
				offset.Store(int64(off))
				_, err := c.Process(context.Background(), testItem("r1", "the app crashes"))
				if err == nil {
					t.Fatalf("offset %d: no error", off)
				}
				if frags := keyFragments(err.Error(), googleShapedKey, 4); len(frags) > 0 {
					t.Errorf("offset %d: the message keeps %q of the key: %s", off, frags, err)
				}
			}
		})
	}
}

// TestClassify_OversizeBody has a server send a 100 MB body: the call
// fails as transient with a message saying so, and the bytes allocated
// while handling it stay near the cap, nowhere near the body's size.
func TestClassify_OversizeBody(t *testing.T) {
	const bodySize = 100 << 20
	chunk := []byte(strings.Repeat("x", 1<<16))
	for _, tc := range []struct {
		name          string
		status        int
		contentLength bool
		msg           string
	}{
		{"200 streamed", 200, false, "larger than 8 MiB"},
		{"200 with its length", 200, true, "larger than 8 MiB"},
		{"500 streamed", 500, false, "larger than 1 MiB"},
		{"429 with its length", 429, true, "larger than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeGemini(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				head := `{"candidates":[{"content":{"role":"model","parts":[{"text":"`
				if tc.contentLength {
					w.Header().Set("Content-Length", strconv.Itoa(len(head)+bodySize))
				}
				w.WriteHeader(tc.status)
				if _, err := io.WriteString(w, head); err != nil {
					return
				}
				for sent := 0; sent < bodySize; sent += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return // the client stopped reading
					}
				}
			})
			c := newTestClassify(t, srv.srv.URL)

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := c.Process(context.Background(), testItem("r1", "the app crashes"))
			runtime.ReadMemStats(&after)

			if class := pipeline.ClassOf(context.Background(), err); class != pipeline.ClassTransient {
				t.Errorf("class %q, want transient: %v", class, err)
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) || len(err.Error()) > 400 {
				t.Errorf("message: %v", err)
			}
			// Reading 8 MiB into a buffer that grows as it goes allocates
			// a few times that (20 MB, 40 MB under -race); reading the whole body
			// could not allocate less than its 100 MB.
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d MB", alloc>>20)
			if alloc > 64<<20 {
				t.Errorf("handling a %d MB body allocated %d MB, want under 64 MB", bodySize>>20, alloc>>20)
			}
		})
	}
}

// TestClassify_MalformedBodyMessage checks a 200 whose body is not JSON
// (cut off mid-answer, or garbage) is transient and explained in one short
// line: the JSON error and the start of the body, not the SDK's prefix and
// the whole body, which a dead letter would otherwise carry.
func TestClassify_MalformedBodyMessage(t *testing.T) {
	full := answer(`{"label":"bug","confidence":0.9,"reason":"`+strings.Repeat("long reason ", 100)+`"}`, "STOP")
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"cut in half", full[:len(full)/2], []string{"is not valid JSON (unexpected end of JSON input", `it starts "{\"candidates\"`, "cut off or malformed"}},
		{"garbage", "<html>oops</html>", []string{"is not valid JSON (invalid character '<'", `it starts "<html>oops</html>"`}},
		{"wrong shape", `{"candidates":[{"index":"zero"}]}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeGemini(t, reply(200, tc.body))
			c := newTestClassify(t, srv.srv.URL)
			_, err := c.Process(context.Background(), testItem("r1", "the app crashes"))
			if err == nil {
				t.Fatal("accepted a malformed body")
			}
			if class := pipeline.ClassOf(context.Background(), err); class != pipeline.ClassTransient {
				t.Errorf("class %q, want transient: %v", class, err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q: %s", w, msg)
				}
			}
			if len(msg) > 400 || strings.Contains(msg, "deserializeUnaryResponse") || strings.Contains(msg, "long reason long reason long reason") {
				t.Errorf("message carries the SDK's internals or the whole body (%d bytes): %s", len(msg), msg)
			}
			if strings.Contains(msg, testKey) {
				t.Errorf("message holds the key: %s", msg)
			}
		})
	}
}

// TestClassify_UnreachableMessage checks a refused connection is
// "unavailable" (the request never reached the API, so it spends none of
// the item's attempts) and says what failed without the SDK's wrapping.
func TestClassify_UnreachableMessage(t *testing.T) {
	srv := newFakeGemini(t, reply(200, "{}"))
	url := srv.srv.URL
	srv.srv.Close()
	c := newTestClassify(t, url)
	_, err := c.Process(context.Background(), testItem("r1", "the app crashes"))
	if err == nil {
		t.Fatal("no error from a closed server")
	}
	if class := pipeline.ClassOf(context.Background(), err); class != pipeline.ClassUnavailable {
		t.Errorf("class %q, want unavailable: %v", class, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "classify: calling "+url+": dial tcp") || !strings.Contains(msg, "connection refused") || strings.Contains(msg, "doRequest") {
		t.Errorf("message: %s", msg)
	}
}

// TestClassify_ErrorBodyWithoutCode checks the HTTP status decides when an
// error body has no code (a proxy's {"error":{}}) or another one: the SDK
// reads the code from the body only. Found by FuzzClassifyResponse (see
// testdata/fuzz/FuzzClassifyResponse).
func TestClassify_ErrorBodyWithoutCode(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   pipeline.Class
		msg    string
	}{
		{429, `{"error":{}}`, pipeline.ClassRateLimited, "rate limited (429 Too Many Requests"},
		{429, `{"error":{"message":"slow down"}}`, pipeline.ClassRateLimited, "slow down"},
		{401, `{"error":{}}`, pipeline.ClassFatal, "API key was rejected"},
		{404, `{"error":{}}`, pipeline.ClassFatal, "not found"},
		{503, `{"error":{}}`, pipeline.ClassOverloaded, "server overloaded (503 Service Unavailable"},
		{400, `{"error":{}}`, pipeline.ClassPermanent, "rejected this item's request (400 Bad Request"},
		{429, `{"error":{"Code":1}}`, pipeline.ClassRateLimited, "rate limited (429 Too Many Requests"},
		{429, `{"error":{"code":500,"status":"INTERNAL"}}`, pipeline.ClassRateLimited, "rate limited (429 INTERNAL"},
		{503, `{"error":{"code":200,"message":"fine"}}`, pipeline.ClassOverloaded, "server overloaded (503 Service Unavailable: fine"},
		{500, `{"error":{"code":500,"status":"INTERNAL"}}`, pipeline.ClassTransient, "server error (500 INTERNAL"},
	} {
		t.Run(fmt.Sprint(tc.status, tc.body), func(t *testing.T) {
			srv := newFakeGemini(t, reply(tc.status, tc.body))
			c := newTestClassify(t, srv.srv.URL)
			_, err := c.Process(context.Background(), testItem("r1", "the app crashes"))
			if class := pipeline.ClassOf(context.Background(), err); class != tc.want {
				t.Errorf("class %q, want %q: %v", class, tc.want, err)
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %v, want one with %q", err, tc.msg)
			}
		})
	}
}

// TestClassify_BillingRefusalHalts: a refusal for the account's credits or
// billing (a 429 with no QuotaFailure, as Gemini sends when prepayment
// credits run dry; a 403 BILLING_DISABLED) is a HaltError whose message
// says what to do, whatever its case and spacing; a quota 429, whose
// message also speaks of "billing details", stays a rate limit.
func TestClassify_BillingRefusalHalts(t *testing.T) {
	const what = "add credits or enable billing for the API key's project, then run again to resume"
	errBody := func(code int, status, msg string, details ...string) string {
		d := ""
		if len(details) > 0 {
			d = `,"details":[` + strings.Join(details, ",") + `]`
		}
		return fmt.Sprintf(`{"error":{"code":%d,"message":%q,"status":%q%s}}`, code, msg, status, d)
	}
	billingDisabled := `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"BILLING_DISABLED","domain":"googleapis.com"}`
	for _, tc := range []struct {
		name   string
		status int
		body   string
		halt   bool
		want   pipeline.Class
	}{
		{"prepayment credits depleted", 429, errBody(429, "RESOURCE_EXHAUSTED", "Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing."), true, pipeline.ClassFatal},
		{"upper case, line breaks", 429, errBody(429, "RESOURCE_EXHAUSTED", "YOUR PREPAYMENT\n  CREDITS ARE DEPLETED."), true, pipeline.ClassFatal},
		{"credits exhausted", 429, errBody(429, "RESOURCE_EXHAUSTED", "Your credits have been exhausted."), true, pipeline.ClassFatal},
		{"exhausted your credits", 429, errBody(429, "RESOURCE_EXHAUSTED", "You have exhausted your free credits."), true, pipeline.ClassFatal},
		{"billing not enabled", 429, errBody(429, "RESOURCE_EXHAUSTED", "This API method requires billing to be enabled. Please enable billing on project #1234 then retry."), true, pipeline.ClassFatal},
		{"billing account disabled", 429, errBody(429, "RESOURCE_EXHAUSTED", "The billing account for the owning project is disabled in state absent"), true, pipeline.ClassFatal},
		{"403 BILLING_DISABLED", 403, errBody(403, "PERMISSION_DENIED", "This API method requires billing to be enabled.", billingDisabled), true, pipeline.ClassFatal},
		{"quota 429 naming billing details", 429, body429Minute, false, pipeline.ClassRateLimited},
		{"bare 429", 429, errBody(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."), false, pipeline.ClassRateLimited},
		{"a quota 429 that names a quota is a quota whatever it says", 429, errBody(429, "RESOURCE_EXHAUSTED", "Your prepayment credits are depleted.",
			`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel"}]}`), false, pipeline.ClassRateLimited},
		{"403 without billing", 403, errBody(403, "PERMISSION_DENIED", "Generative Language API has not been used in project 1234 before or it is disabled. Enable it by visiting the console."), false, pipeline.ClassFatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeGemini(t, reply(tc.status, tc.body))
			c := newTestClassify(t, srv.srv.URL)
			_, err := c.Process(context.Background(), testItem("r1", "the app crashes"))
			if class := pipeline.ClassOf(context.Background(), err); class != tc.want {
				t.Errorf("class %q, want %q: %v", class, tc.want, err)
			}
			var he *pipeline.HaltError
			if got := errors.As(err, &he); got != tc.halt {
				t.Fatalf("halts = %v, want %v: %v", got, tc.halt, err)
			}
			if tc.halt && (!strings.HasPrefix(he.Error(), "classify: the account cannot pay for calls (") || !strings.HasSuffix(he.Error(), what)) {
				t.Errorf("message %q, want one that says what happened and ends %q", he, what)
			}
		})
	}
}

// TestClassify_UnusableAnswerIsNotA5xx: a 200 with nothing usable in it
// (no candidates and no block reason, an empty object, a model that
// stopped early for no stated cause) is retried as transient but marked a
// pipeline.AnswerFault, so the run counts it as a bad answer, not as a
// 5xx or a timeout; a 500 is not marked.
func TestClassify_UnusableAnswerIsNotA5xx(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		fault  bool
	}{
		{"no candidates, no block reason", 200, `{"candidates":[],"usageMetadata":{"promptTokenCount":11,"totalTokenCount":11}}`, true},
		{"an empty object", 200, `{}`, true},
		{"stopped early", 200, answer("", "OTHER"), true},
		{"a 500", 500, body500, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, llm := range []bool{false, true} {
				srv := newFakeGemini(t, reply(tc.status, tc.body))
				var err error
				if llm {
					ep := Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: srv.srv.URL}
					l := newTestLLM(t, LLMConfig{Name: "classify", Endpoint: ep, Labels: []string{"bug", "other"}})
					_, err = l.Process(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "r1", Text: "the app crashes"}})
				} else {
					_, err = newTestClassify(t, srv.srv.URL).Process(context.Background(), testItem("r1", "the app crashes"))
				}
				if class := pipeline.ClassOf(context.Background(), err); class != pipeline.ClassTransient {
					t.Errorf("llm %v: class %q, want transient: %v", llm, class, err)
				}
				var af pipeline.AnswerFault
				if got := errors.As(err, &af) && af.AnswerFault(); got != tc.fault {
					t.Errorf("llm %v: an unusable answer = %v, want %v: %v", llm, got, tc.fault, err)
				}
			}
		})
	}
}

// TestGeminiErrors_NameTheStage: every message names the stage the mapping
// was built for, whatever the stage is called, and a rejected key says
// what to do on the stage's own backend.
func TestGeminiErrors_NameTheStage(t *testing.T) {
	calls := []struct {
		name  string
		err   error
		class pipeline.Class
		want  string
	}{
		{"key", genai.APIError{Code: 401, Status: "UNAUTHENTICATED"}, pipeline.ClassFatal, "the API key was rejected (401 UNAUTHENTICATED): "},
		{"model", genai.APIError{Code: 404, Status: "NOT_FOUND"}, pipeline.ClassFatal, `model "gemini-2.0-flash" not found at http://127.0.0.1:1 (404 NOT_FOUND)`},
		{"quota", genai.APIError{Code: 429, Status: "RESOURCE_EXHAUSTED", Message: "slow down"}, pipeline.ClassRateLimited, "rate limited (429 RESOURCE_EXHAUSTED): slow down"},
		{"overloaded", genai.APIError{Code: 503, Status: "UNAVAILABLE", Message: "busy"}, pipeline.ClassOverloaded, "server overloaded (503 UNAVAILABLE: busy)"},
		{"timeout", fmt.Errorf("post: %w", context.DeadlineExceeded), pipeline.ClassTransient, "no complete answer from http://127.0.0.1:1 within 7s"},
	}
	for _, backend := range []string{BackendGemini, BackendVertex} {
		for _, stage := range []string{"classify", "summary"} {
			ep := Endpoint{Backend: backend, APIKey: testKey, BaseURL: "http://127.0.0.1:1", Project: "p", Location: "l"}
			client, err := newClient(context.Background(), stage, ep)
			if err != nil {
				t.Fatal(err)
			}
			e := newGeminiErrors(stage, client, ep, "gemini-2.0-flash", 7*time.Second)
			for _, c := range calls {
				t.Run(backend+"/"+stage+"/"+c.name, func(t *testing.T) {
					err := e.callError(c.err)
					if got := pipeline.ClassOf(context.Background(), err); got != c.class {
						t.Errorf("class = %s, want %s", got, c.class)
					}
					if want := stage + ": " + c.want; !strings.HasPrefix(err.Error(), want) {
						t.Errorf("message = %q, want it to start %q", err, want)
					}
					if c.name != "key" {
						return
					}
					hint := "set GEMINI_API_KEY"
					if backend == BackendVertex {
						hint = "check the Vertex AI credentials"
					}
					if !strings.Contains(err.Error(), hint) {
						t.Errorf("message = %q, want it to say %q", err, hint)
					}
				})
			}
		}
	}
}
