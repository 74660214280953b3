package stages

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// isItemVerdict checks err the way the runner does: by method, through
// any wrapping, without naming this package's type.
func isItemVerdict(err error) bool {
	var v interface{ ItemVerdict() bool }
	return errors.As(err, &v) && v.ItemVerdict()
}

func TestVerdict(t *testing.T) {
	base := errors.New("blocked")
	for _, tc := range []struct {
		name    string
		err     error
		verdict bool
		class   pipeline.Class
	}{
		{"verdict", verdict(base), true, pipeline.ClassPermanent},
		{"wrapped verdict", fmt.Errorf("item %q: %w", "r1", verdict(base)), true, pipeline.ClassPermanent},
		{"plain permanent", pipeline.Permanent(base), false, pipeline.ClassPermanent},
		{"transient", base, false, pipeline.ClassTransient},
		{"nil", verdict(nil), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isItemVerdict(tc.err); got != tc.verdict {
				t.Errorf("verdict = %v, want %v", got, tc.verdict)
			}
			if got := pipeline.ClassOf(context.Background(), tc.err); got != tc.class {
				t.Errorf("class = %q, want %q", got, tc.class)
			}
			if tc.verdict && !errors.Is(tc.err, base) {
				t.Errorf("the verdict hides its cause")
			}
		})
	}
}

// TestClassify_EmptyTextVerdict checks an item with nothing to classify is
// a verdict on the item, sent to no one.
func TestClassify_EmptyTextVerdict(t *testing.T) {
	srv := newFakeGemini(t, reply(200, answer(`{"label":"bug","confidence":0.9,"reason":"x"}`, "STOP")))
	c := newTestClassify(t, srv.srv.URL)
	_, err := c.Process(context.Background(), testItem("r1", " \n "))
	if !isItemVerdict(err) || pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent {
		t.Errorf("err = %v, want a permanent verdict on the item", err)
	}
	if n := srv.requests.Load(); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}
