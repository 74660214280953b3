package batch

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// lateCancel stands between the driver and the simulator for the API's
// asynchronous cancel: a cancel is answered 200 but not passed on while
// drop is set (the API accepted it and has not applied it yet), and the
// first look after a cancel fails with 503 when failLook is set.
type lateCancel struct {
	base     http.RoundTripper
	drop     bool
	failLook bool
	mu       sync.Mutex
	cancels  int
	looked   bool
}

func (l *lateCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	cancel := strings.HasSuffix(r.URL.Path, ":cancel")
	if cancel {
		l.cancels++
		l.looked = false
	}
	failLook := l.failLook && !cancel && r.Method == http.MethodGet && l.cancels > 0 && !l.looked
	if !cancel && r.Method == http.MethodGet {
		l.looked = true
	}
	l.mu.Unlock()
	switch {
	case cancel && l.drop:
		return answer(r, http.StatusOK, `{}`), nil
	case failLook:
		return answer(r, http.StatusServiceUnavailable, `{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}`), nil
	}
	return l.base.RoundTrip(r)
}

func answer(r *http.Request, code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}
}

// through makes f's API client go through rt.
func (f *fixture) through(t *testing.T, rt http.RoundTripper) {
	t.Helper()
	api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: f.api.ClientConfig().HTTPOptions.BaseURL, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
		HTTPClient:  &http.Client{Transport: rt},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
}

// TestDriver_DeadlineCancelKeepsAJobThatMayStillAnswer drives one job of
// 10 items that runs for an hour past a 30-minute deadline: whatever the
// cancel at the deadline meets, a job that ends SUCCEEDED has every item
// answered by it, none returned to the queue (returned items are paid
// again online or in the next job).
func TestDriver_DeadlineCancelKeepsAJobThatMayStillAnswer(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		// finishAtDeadline ends the job between the look that finds it
		// past the deadline and the cancel.
		finishAtDeadline bool
		cancel           *lateCancel
	}{
		{name: "succeeded between the look at the deadline and the cancel", finishAtDeadline: true},
		{name: "cancel accepted but not yet applied", cancel: &lateCancel{base: http.DefaultTransport, drop: true}},
		{name: "cancel not applied and the look after it fails", cancel: &lateCancel{base: http.DefaultTransport, drop: true, failLook: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f *fixture
			bc := geminisim.BatchConfig{Running: time.Hour}
			if tc.finishAtDeadline {
				bc.Observe = func(e geminisim.BatchEvent) {
					// This look found the job RUNNING past the deadline; by
					// the time the cancel arrives it has ended.
					if e == geminisim.EventPoll && f.clock.Now().Sub(start) >= 30*time.Minute {
						f.clock.mu.Lock()
						f.clock.t = start.Add(2 * time.Hour)
						f.clock.mu.Unlock()
					}
				}
			}
			f = newFixture(t, 10, bc)
			if tc.cancel != nil {
				f.through(t, tc.cancel)
			}
			sum, err := f.driver(f.db, Config{Mode: ModeAuto, Deadline: 30 * time.Minute}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if sum.Answered != 10 || sum.Returned != 0 || sum.Succeeded != 1 || sum.Deadline != 0 {
				t.Errorf("summary %+v: want the 10 answers of the job that succeeded, none returned", sum)
			}
			if done, _, queued := f.state(t); done != 10 || queued != 0 {
				t.Errorf("done %d, queued %d: want 10 and 0", done, queued)
			}
			jobs, _ := f.db.BatchJobs(false)
			if len(jobs) != 1 || jobs[0].Answered != 10 || jobs[0].Returned != 0 || jobs[0].State != string(genai.JobStateSucceeded) {
				t.Errorf("job record %+v", jobs)
			}
			if tc.cancel != nil && tc.cancel.cancels == 0 {
				t.Error("no cancel was sent at the deadline")
			}
			f.answeredOnce(t)
		})
	}
}
