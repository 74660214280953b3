package stages

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

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
// error body has no code (a proxy's {"error":{}}): the SDK reads the code
// from the body only. Found by FuzzClassifyResponse (see
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
		{503, `{"error":{}}`, pipeline.ClassTransient, "server error (503 Service Unavailable"},
		{400, `{"error":{}}`, pipeline.ClassPermanent, "rejected this item's request (400 Bad Request"},
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
