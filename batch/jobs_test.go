package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
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

// failDownload fails the first n downloads of a results file: with a 503
// and the API's JSON error body, or (reset) with a dropped connection.
type failDownload struct {
	base  http.RoundTripper
	reset bool
	mu    sync.Mutex
	n     int
	// failed counts the downloads failed.
	failed int
}

func (f *failDownload) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	fail := strings.HasSuffix(r.URL.Path, ":download") && f.failed < f.n
	if fail {
		f.failed++
	}
	f.mu.Unlock()
	switch {
	case fail && f.reset:
		return nil, errors.New("connection reset by peer")
	case fail:
		return answer(r, http.StatusServiceUnavailable, `{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}`), nil
	}
	return f.base.RoundTrip(r)
}

// TestDriver_UnreadResultsAreNeverReturned: a SUCCEEDED file job whose
// first download fails (a 503 with its JSON error body, a dropped
// connection) keeps its items and is read again at a later poll, which
// answers every item; none goes back to the queue, in batch mode and in
// auto mode past the run's deadline alike.
func TestDriver_UnreadResultsAreNeverReturned(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, reset := range []bool{false, true} {
		for _, mode := range []Mode{ModeBatch, ModeAuto} {
			t.Run(fmt.Sprintf("%s reset=%v", mode, reset), func(t *testing.T) {
				var f *fixture
				bc := geminisim.BatchConfig{Running: time.Minute}
				if mode == ModeAuto {
					// The job is found SUCCEEDED by the look after the
					// cancel at the run's deadline.
					bc.Running = time.Hour
					bc.Observe = func(e geminisim.BatchEvent) {
						if e == geminisim.EventPoll && f.clock.Now().Sub(start) >= 30*time.Minute {
							f.clock.mu.Lock()
							f.clock.t = start.Add(2 * time.Hour)
							f.clock.mu.Unlock()
						}
					}
				}
				f = newFixture(t, 12, bc)
				fd := &failDownload{base: http.DefaultTransport, reset: reset, n: 1}
				f.through(t, fd)
				sum, err := f.driver(f.db, Config{Mode: mode, Size: 12, InlineBytes: 1000, Deadline: 30 * time.Minute}).Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if fd.failed != 1 || sum.Returned != 0 || sum.Answered != 12 || sum.Succeeded != 1 || sum.Failed != 0 {
					t.Errorf("summary %+v after %d failed downloads: want every item answered by the job, none returned", sum, fd.failed)
				}
				if done, _, queued := f.state(t); done != 12 || queued != 0 {
					t.Errorf("done %d, queued %d: want 12 and 0", done, queued)
				}
				f.answeredOnce(t)
			})
		}
	}
}

// TestDriver_UnreadAtTheAutoDeadlineStops: in auto mode, results that
// cannot be read by the run's deadline leave the job open holding its
// items and stop the run (ErrStopped); the next run collects them.
func TestDriver_UnreadAtTheAutoDeadlineStops(t *testing.T) {
	f := newFixture(t, 12, geminisim.BatchConfig{Running: time.Minute})
	good := f.api
	f.through(t, &failDownload{base: http.DefaultTransport, n: 1 << 30})
	cfg := Config{Mode: ModeAuto, Size: 12, InlineBytes: 1000, Deadline: 30 * time.Minute}
	sum, err := f.driver(f.db, cfg).Run(context.Background())
	if !errors.Is(err, pipeline.ErrStopped) || !strings.Contains(err.Error(), "run the same command again") {
		t.Fatalf("run: %v, want it stopped saying to run again", err)
	}
	if sum.Returned != 0 || sum.Answered != 0 {
		t.Errorf("summary %+v: want nothing returned", sum)
	}
	jobs, _ := f.db.BatchJobs(true)
	if len(jobs) != 1 || len(jobs[0].Items) != 12 || jobs[0].State != string(genai.JobStateSucceeded) {
		t.Fatalf("open jobs %+v: want the SUCCEEDED job holding its 12 items", jobs)
	}
	f.api = good
	if sum, err = f.driver(f.db, cfg).Run(context.Background()); err != nil || sum.Answered != 12 || sum.Returned != 0 {
		t.Fatalf("next run: %+v %v: want the 12 answers collected", sum, err)
	}
	f.answeredOnce(t)
}

// TestCancel_UnreadResultsAreNeverReturned: batch cancel of a SUCCEEDED
// file job whose download fails changes nothing; the next cancel collects
// every answer.
func TestCancel_UnreadResultsAreNeverReturned(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			f := newFixture(t, 12, geminisim.BatchConfig{Running: time.Minute})
			ctx, stop := context.WithCancel(context.Background())
			d := f.driver(f.db, Config{Size: 12, InlineBytes: 1000})
			d.cfg.Sleep = func(context.Context, time.Duration) error { stop(); return context.Canceled }
			if _, err := d.Run(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("run: %v", err)
			}
			f.clock.Sleep(context.Background(), time.Hour) //nolint:errcheck // a background context
			f.through(t, &failDownload{base: http.DefaultTransport, reset: reset, n: 1})
			cfg := CancelConfig{Stage: f.cls, Now: f.clock.Now, Sleep: f.clock.Sleep}
			res, err := Cancel(context.Background(), f.api, f.db, 1, cfg)
			if err == nil || res.Returned != 0 || !res.Job.Open() {
				t.Fatalf("cancel with the download failing: %+v %v: want an error and nothing changed", res, err)
			}
			res, err = Cancel(context.Background(), f.api, f.db, 1, cfg)
			if err != nil || !res.Collected || res.Answered != 12 || res.Returned != 0 || res.Job.Open() {
				t.Fatalf("cancel again: %+v %v: want the 12 answers collected", res, err)
			}
			f.answeredOnce(t)
		})
	}
}

// TestDriver_CutOffLetterStoresItsCause: an item whose answers were cut
// off at the output budget in every job it was sent in is dead-lettered
// with the stage's cause (a larger budget may fix it), which the front
// end words the advice by; its message keeps the last answer's.
func TestDriver_CutOffLetterStoresItsCause(t *testing.T) {
	f := newFixtureSim(t, 2, geminisim.Config{Seed: 7, Faults: geminisim.Faults{MaxTokens: 1}})
	if _, err := f.driver(f.db, Config{Mode: ModeBatch, MaxSends: 1}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r000", "r001"} {
		loc, err := f.db.Locate(id)
		if err != nil || loc.Dead == nil {
			t.Fatalf("%s: %+v %v, want a dead letter", id, loc, err)
		}
		if loc.Dead.Cause != stages.CauseOutputBudget || !strings.Contains(loc.Dead.Message, "cut off at") {
			t.Errorf("%s: dead letter %+v, want cause %q and the cut-off in its message", id, *loc.Dead, stages.CauseOutputBudget)
		}
	}
}

// causedErr is a stage's error that knows why its item is dead-lettered.
type causedErr struct{ cause pipeline.DeadCause }

func (e causedErr) Error() string                 { return "cut off" }
func (e causedErr) DeadCause() pipeline.DeadCause { return e.cause }

// TestDriver_TransitionKeepsCause: a permanent failure in a job's results
// is stored with the cause its error carries (and none when it carries
// none).
func TestDriver_TransitionKeepsCause(t *testing.T) {
	f := newFixture(t, 1, geminisim.BatchConfig{})
	d := f.driver(f.db, Config{Mode: ModeBatch})
	for _, tc := range []struct {
		name string
		err  error
		want pipeline.DeadCause
	}{
		{"with a cause", pipeline.Permanent(causedErr{stages.CauseOutputBudget}), stages.CauseOutputBudget},
		{"without", pipeline.Permanent(errors.New("blocked")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, ok := d.transition(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "r000"}}, pipeline.Result{}, tc.err, f.clock.Now())
			if !ok || tr.Outcome != pipeline.DeadLettered {
				t.Fatalf("transition %+v ok=%v, want a dead letter", tr, ok)
			}
			if tr.Dead.Cause != tc.want {
				t.Errorf("cause %q, want %q", tr.Dead.Cause, tc.want)
			}
		})
	}
}
