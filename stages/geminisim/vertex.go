// This file serves the Vertex AI surface: the same models, quota and
// answers under Vertex's paths, with Vertex's bare 429s.

package geminisim

import (
	"net/http"
	"regexp"
	"strconv"
)

// vertexPath matches a Vertex AI generateContent or countTokens path:
// /v1beta1/projects/{p}/locations/{l}/publishers/google/models/{m}:{method}
// (and /v1/...).
var vertexPath = regexp.MustCompile(`^/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/google/models/([^/:]+):(generateContent|countTokens)$`)

// vertexRoute serves a Vertex AI request as the Gemini API one it
// corresponds to. A Vertex request carries an OAuth token, not an API
// key, and the simulator checks no token: it is let in as if it carried
// the configured key. Vertex's 429s name no quota and give no retry
// delay (google.rpc details are absent), so the response writer strips
// them. Other requests pass through unchanged.
func (s *Server) vertexRoute(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	m := vertexPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return w, r
	}
	r = r.Clone(r.Context())
	r.URL.Path = "/v1beta/models/" + m[1] + ":" + m[2]
	r.URL.RawPath = ""
	r.Header.Set("X-Goog-Api-Key", s.cfg.APIKey)
	return &vertexWriter{ResponseWriter: w}, r
}

// vertexWriter rewrites a 429 into Vertex's bare form.
type vertexWriter struct {
	http.ResponseWriter
	limited  bool // a 429 was sent: its body is replaced
	replaced bool // the replacement body was written
}

// vertex429 is the body Vertex AI sends with a 429: no details.
const vertex429 = `{"error":{"code":429,"message":"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.","status":"RESOURCE_EXHAUSTED"}}`

func (v *vertexWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		v.limited = true
		v.Header().Set("Content-Length", strconv.Itoa(len(vertex429)))
	}
	v.ResponseWriter.WriteHeader(code)
}

func (v *vertexWriter) Write(b []byte) (int, error) {
	if !v.limited {
		return v.ResponseWriter.Write(b)
	}
	if !v.replaced {
		v.replaced = true
		if _, err := v.ResponseWriter.Write([]byte(vertex429)); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Flush passes a flush through (the simulator streams nothing, but a
// wrapper must not hide the interface).
func (v *vertexWriter) Flush() {
	if f, ok := v.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
