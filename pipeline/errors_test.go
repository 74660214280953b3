package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// dialTimeout is the error Go's dialer returns when connecting times out:
// it matches context.DeadlineExceeded too.
type dialTimeout struct{}

func (dialTimeout) Error() string   { return "i/o timeout" }
func (dialTimeout) Timeout() bool   { return true }
func (dialTimeout) Temporary() bool { return true }
func (dialTimeout) Is(err error) bool {
	return err == context.DeadlineExceeded
}

func TestClassOf(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	post := func(err error) error { return &url.Error{Op: "Post", URL: "https://example.invalid/v1", Err: err} }
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want pipeline.Class
	}{
		{"nil", context.Background(), nil, ""},
		{"plain error is transient", context.Background(), errors.New("503"), pipeline.ClassTransient},
		{"permanent", context.Background(), pipeline.Permanentf("bad"), pipeline.ClassPermanent},
		{"verdict is permanent", context.Background(), verdict(errors.New("blocked")), pipeline.ClassPermanent},
		{"rate limited", context.Background(), pipeline.RateLimited(errors.New("429"), time.Second, false), pipeline.ClassRateLimited},
		{"unavailable", context.Background(), pipeline.Unavailable(errors.New("refused")), pipeline.ClassUnavailable},
		{"overloaded", context.Background(), fmt.Errorf("classify: %w", pipeline.Overloaded(errors.New("503 UNAVAILABLE"))), pipeline.ClassOverloaded},
		{"fatal wins over overloaded", context.Background(), pipeline.Fatal(pipeline.Overloaded(errors.New("503"))), pipeline.ClassFatal},
		{"fatal wins over a canceled run", canceled, fmt.Errorf("x: %w", pipeline.Fatal(errors.New("bad key"))), pipeline.ClassFatal},
		{"canceled run", canceled, context.Canceled, pipeline.ClassCanceled},
		{"request timeout while the run goes on is transient", context.Background(), fmt.Errorf("call: %w", context.DeadlineExceeded), pipeline.ClassTransient},
		{"connect timeout is unavailable", context.Background(),
			fmt.Errorf("classify: no answer: %w", post(&net.OpError{Op: "dial", Net: "tcp", Err: dialTimeout{}})), pipeline.ClassUnavailable},
		{"connection refused is unavailable", context.Background(),
			post(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}), pipeline.ClassUnavailable},
		{"DNS failure is unavailable", context.Background(), post(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x.invalid"}}), pipeline.ClassUnavailable},
		{"read timeout is transient", context.Background(), post(&net.OpError{Op: "read", Net: "tcp", Err: dialTimeout{}}), pipeline.ClassTransient},
		{"a stage's own class wins over the dial", context.Background(),
			pipeline.Permanent(post(&net.OpError{Op: "dial", Err: errors.New("refused")})), pipeline.ClassPermanent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "connect timeout is unavailable" && !errors.Is(tc.err, context.DeadlineExceeded) {
				t.Fatal("the connect timeout must also match context.DeadlineExceeded, as Go's does")
			}
			if got := pipeline.ClassOf(tc.ctx, tc.err); got != tc.want {
				t.Errorf("ClassOf = %q, want %q", got, tc.want)
			}
		})
	}
}
