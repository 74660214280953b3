package stages

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/genai"
)

// Backends an LLM stage can call.
const (
	// BackendGemini is the Gemini API: an API key, generativelanguage.
	BackendGemini = "gemini"
	// BackendVertex is Vertex AI: a project and a location, credentials
	// by Application Default Credentials (none with a custom BaseURL).
	BackendVertex = "vertex"
)

// Endpoint says where an LLM stage's calls go and how they authenticate.
type Endpoint struct {
	// Backend is BackendGemini or BackendVertex; "" means BackendVertex
	// when $GOOGLE_GENAI_USE_VERTEXAI is 1 or true, else BackendGemini.
	Backend string
	// APIKey is the Gemini API key (normally $GEMINI_API_KEY); required
	// for BackendGemini, unused for Vertex AI.
	APIKey string
	// BaseURL is the API's root URL (a simulator, a proxy); "" means
	// $GOOGLE_GEMINI_BASE_URL (Gemini) or $GOOGLE_VERTEX_BASE_URL
	// (Vertex AI), else Google's endpoint. With a custom BaseURL, Vertex
	// AI calls carry no credentials.
	BaseURL string
	// Project and Location are the Vertex AI project and region; ""
	// means $GOOGLE_CLOUD_PROJECT and $GOOGLE_CLOUD_LOCATION.
	Project  string
	Location string
	// HTTPClient sends the requests; nil means a pooled client.
	HTTPClient *http.Client
}

// ResolvedBackend is the backend e names once the environment is read.
func (e Endpoint) ResolvedBackend() string {
	if e.Backend != "" {
		return e.Backend
	}
	switch strings.ToLower(os.Getenv("GOOGLE_GENAI_USE_VERTEXAI")) {
	case "1", "true":
		return BackendVertex
	}
	return BackendGemini
}

// newClient builds the genai client of e, with the SDK's retries off and
// the transport that caps bodies and records statuses (callTransport).
// It sends no request.
func newClient(ctx context.Context, who string, e Endpoint) (*genai.Client, error) {
	httpClient := &http.Client{}
	if e.HTTPClient != nil {
		*httpClient = *e.HTTPClient
	}
	if httpClient.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Idle connections kept for the next calls, per host; no other
		// cap (the default transport's 100 in all would cut it). No
		// MaxConnsPerHost and no header timeout: a flex call holds its
		// connection for minutes, bounded by its context (TierConfig).
		t.MaxIdleConnsPerHost = 256
		t.MaxIdleConns = 0
		httpClient.Transport = t
	}
	httpClient.Transport = callTransport{base: httpClient.Transport, maxBody: MaxResponseBytes}
	cc := &genai.ClientConfig{
		HTTPOptions: genai.HTTPOptions{
			BaseURL:      e.BaseURL,
			RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)},
		},
		HTTPClient: httpClient,
	}
	switch backend := e.ResolvedBackend(); backend {
	case BackendGemini:
		if strings.TrimSpace(e.APIKey) == "" {
			return nil, fmt.Errorf("%s: no Gemini API key: set GEMINI_API_KEY (create one at https://aistudio.google.com/apikey), or use `backend: vertex`", who)
		}
		cc.Backend, cc.APIKey = genai.BackendGeminiAPI, e.APIKey
	case BackendVertex:
		cc.Backend = genai.BackendVertexAI
		cc.Project = orDefault(e.Project, os.Getenv("GOOGLE_CLOUD_PROJECT"))
		cc.Location = orDefault(e.Location, orDefault(os.Getenv("GOOGLE_CLOUD_LOCATION"), os.Getenv("GOOGLE_CLOUD_REGION")))
		if cc.Project == "" || cc.Location == "" {
			return nil, fmt.Errorf("%s: Vertex AI needs a project and a location: set `project:` and `location:` in the job file, or GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION", who)
		}
		if e.BaseURL == "" && os.Getenv("GOOGLE_VERTEX_BASE_URL") == "" {
			// Google's endpoint: Application Default Credentials on our
			// client (the SDK looks for them only when it builds its own).
			if err := cc.UseDefaultCredentials(); err != nil {
				return nil, fmt.Errorf("%s: Vertex AI credentials: %v: run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS", who, err)
			}
		}
	default:
		return nil, fmt.Errorf("%s: backend %q: use %s or %s", who, backend, BackendGemini, BackendVertex)
	}
	client, err := genai.NewClient(ctx, cc)
	if err != nil {
		// The SDK's messages can dump the whole config, key included.
		return nil, fmt.Errorf("%s: create Gemini client: %s", who, redact(err.Error(), e.APIKey))
	}
	return client, nil
}

// statusKey is the context key of the *atomic.Int32 where callTransport
// leaves the HTTP status of a call's response.
type statusKey struct{}

// callTransport wraps the client's transport for two things the SDK does
// not do. It remembers each response's HTTP status for the call that asked
// (see statusKey): the SDK builds an APIError from the body alone. And it
// caps each response body at maxBody bytes: the SDK reads bodies whole
// into memory, so a hostile or broken server sending 100 MB would cost
// 100 MB (or more) per call in flight.
type callTransport struct {
	base    http.RoundTripper
	maxBody int64
}

func (t callTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if resp == nil {
		return resp, err
	}
	if p, ok := req.Context().Value(statusKey{}).(*atomic.Int32); ok {
		p.Store(int32(resp.StatusCode))
	}
	if resp.Body != nil {
		limit := t.maxBody
		if resp.StatusCode >= 300 {
			// The SDK copies an error body into its message several
			// times over: a smaller cap keeps that small too.
			limit = min(limit, MaxErrorBodyBytes)
		}
		left := limit
		if resp.ContentLength > limit {
			left = 0 // refuse at the first read, without reading the cap's worth
		}
		resp.Body = &cappedBody{rc: resp.Body, left: left, max: limit}
	}
	return resp, err
}

// MaxResponseBytes caps one response body. A label, a confidence and a
// reason take a few hundred bytes and Gemini's error bodies a few
// kilobytes; anything near the cap is not an answer to this request.
const MaxResponseBytes = 8 << 20

// MaxErrorBodyBytes caps the body of a response with a status of 300 or
// more: Gemini's error bodies, details included, take a few kilobytes.
const MaxErrorBodyBytes = 1 << 20

// bodyTooLargeError is what reading a body past the cap returns. Closing
// the body unread drops the connection rather than draining the rest.
type bodyTooLargeError struct{ max int64 }

func (e *bodyTooLargeError) Error() string {
	return fmt.Sprintf("response body larger than %d MiB", e.max>>20)
}

// cappedBody reads at most left more bytes of rc, then fails with a
// *bodyTooLargeError if rc has more.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the cap: one more byte means the body is too large; none
		// means it was exactly the cap.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, &bodyTooLargeError{max: b.max}
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
