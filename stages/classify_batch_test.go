package stages

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestClassify_BatchRequest(t *testing.T) {
	c := newTestClassify(t, "http://127.0.0.1:1")
	it := pipeline.Item{Record: pipeline.Record{ID: "r1", Text: "raw"},
		Outputs: map[string]json.RawMessage{"sanitize": json.RawMessage(`{"text":"the app crashes"}`)}}
	req, err := c.BatchRequest(it)
	if err != nil {
		t.Fatal(err)
	}
	online := c.requestConfig(c.firstRequest())
	if req.Model != c.Model() || req.Config.SystemInstruction.Parts[0].Text != online.SystemInstruction.Parts[0].Text ||
		req.Config.MaxOutputTokens != online.MaxOutputTokens || req.Config.ResponseSchema == nil || req.Config.HTTPOptions != nil {
		t.Errorf("batch request %+v differs from the online one", req.Config)
	}
	if len(req.Contents) != 1 || req.Contents[0].Parts[0].Text == "" {
		t.Errorf("contents %+v", req.Contents)
	}
	_, err = c.BatchRequest(pipeline.Item{Record: pipeline.Record{ID: "r2", Text: "  "}})
	var v *VerdictError
	if !errors.As(err, &v) || pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent {
		t.Errorf("empty text: %v, want a permanent verdict", err)
	}
}

func TestClassify_DecodeBatchRowErrors(t *testing.T) {
	c := newTestClassify(t, "http://127.0.0.1:1")
	it := pipeline.Item{Record: pipeline.Record{ID: "r1", Text: "x"}}
	cases := []struct {
		name string
		code int32
		want pipeline.Class
	}{
		{"INTERNAL", 13, pipeline.ClassTransient},
		{"UNAVAILABLE", 14, pipeline.ClassOverloaded},
		{"DEADLINE_EXCEEDED", 4, pipeline.ClassTransient},
		{"RESOURCE_EXHAUSTED", 8, pipeline.ClassRateLimited},
		{"INVALID_ARGUMENT", 3, pipeline.ClassPermanent},
		{"PERMISSION_DENIED", 7, pipeline.ClassFatal},
		{"an HTTP 503", 503, pipeline.ClassOverloaded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.DecodeBatch(it, nil, &genai.JobError{Code: genai.Ptr(tc.code), Message: "m"})
			if got := pipeline.ClassOf(context.Background(), err); got != tc.want {
				t.Errorf("class %s, want %s (%v)", got, tc.want, err)
			}
		})
	}
	if _, err := c.DecodeBatch(it, nil, nil); pipeline.ClassOf(context.Background(), err) != pipeline.ClassTransient {
		t.Errorf("no response and no error: %v, want transient", err)
	}
}
