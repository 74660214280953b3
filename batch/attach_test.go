package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"google.golang.org/genai"
)

// createTwice sends the first batch create twice (as a proxy that
// retried it would) and loses both answers: the API then holds two jobs
// with one display name, and the driver has to re-attach.
type createTwice struct {
	base http.RoundTripper
	once sync.Once
}

func (c *createTwice) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, ":batchGenerateContent") {
		return c.base.RoundTrip(r)
	}
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return c.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	for range 2 {
		again := r.Clone(r.Context())
		again.Body, again.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp, err := c.base.RoundTrip(again)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
	}
	return nil, errors.New("connection reset by peer")
}

// TestDriver_AttachTwoJobsOneNameWarns: two API jobs carrying one display
// name are reported with both names (the one attached, the other to
// cancel at the API), and the warning names no command: the driver's
// caller words what to do.
func TestDriver_AttachTwoJobsOneNameWarns(t *testing.T) {
	f := newFixture(t, 4, geminisim.BatchConfig{Running: time.Minute})
	api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: f.api.ClientConfig().HTTPOptions.BaseURL, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
		HTTPClient:  &http.Client{Transport: &createTwice{base: http.DefaultTransport}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
	var logged bytes.Buffer
	sum, err := f.driver(f.db, Config{Size: 4, Log: slog.New(slog.NewTextHandler(&logged, nil))}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Reattached != 1 || sum.Answered != 4 {
		t.Errorf("summary %+v: want one job re-attached and every item answered", sum)
	}
	got := logged.String()
	if !strings.Contains(got, "two API jobs carry one display name") || !strings.Contains(got, "other=batches/") {
		t.Errorf("logged %q: want the warning with the other job's name", got)
	}
	if strings.Contains(got, "sawtooth ") {
		t.Errorf("logged %q: the driver names a command", got)
	}
}

// recordedElsewhere records another API name for a batch job just before
// the driver records the one it created, as a second writer of the same
// intent would: the store then refuses the driver's with a
// TwoBatchJobsError.
type recordedElsewhere struct {
	Store
}

func (r recordedElsewhere) SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error) {
	if _, err := r.Store.SetBatchName(num, "batches/recorded-elsewhere", state, now); err != nil {
		return pipeline.BatchJob{}, err
	}
	return r.Store.SetBatchName(num, name, state, now)
}

// TestDriver_CreatedButRefusedIsCancelled: a job the store refuses to
// record, because another job is recorded for its intent, is cancelled at
// the API: only the recorded job is ever collected, so this one would be
// paid for and its answers thrown away.
func TestDriver_CreatedButRefusedIsCancelled(t *testing.T) {
	f := newFixture(t, 4, geminisim.BatchConfig{Running: time.Minute})
	var logged bytes.Buffer
	_, err := f.driver(recordedElsewhere{f.db}, Config{Size: 4, Log: slog.New(slog.NewTextHandler(&logged, nil))}).Run(context.Background())
	var two *pipeline.TwoBatchJobsError
	if !errors.As(err, &two) {
		t.Fatalf("Run: %v, want the store's TwoBatchJobsError", err)
	}
	var live []string
	for j, err := range f.api.Batches.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if j.Name == two.Want && j.State != genai.JobStateCancelled && j.State != genai.JobStateCancelling {
			live = append(live, fmt.Sprintf("%s %s", j.Name, j.State))
		}
	}
	if len(live) > 0 {
		t.Errorf("the unrecorded job is still live at the API: %v", live)
	}
	if !strings.Contains(logged.String(), "was cancelled at the API") {
		t.Errorf("logged %q: want the cancel said", logged.String())
	}
}

// TestDriver_AttachedButRefusedIsCancelled: a job found by its display
// name after a lost create answer, which the store refuses to record
// because another job is recorded for its intent, is cancelled at the
// API as one created and refused is: the CLI's hint for a
// TwoBatchJobsError says the run cancels it.
func TestDriver_AttachedButRefusedIsCancelled(t *testing.T) {
	f := newFixture(t, 4, geminisim.BatchConfig{Running: time.Hour})
	api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: f.api.ClientConfig().HTTPOptions.BaseURL, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
		HTTPClient:  &http.Client{Transport: &createTwice{base: http.DefaultTransport}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
	var logged bytes.Buffer
	_, err = f.driver(recordedElsewhere{f.db}, Config{Size: 4, Log: slog.New(slog.NewTextHandler(&logged, nil))}).Run(context.Background())
	var two *pipeline.TwoBatchJobsError
	if !errors.As(err, &two) {
		t.Fatalf("Run: %v, want the store's TwoBatchJobsError", err)
	}
	for j, err := range f.api.Batches.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if j.Name == two.Want && j.State != genai.JobStateCancelled && j.State != genai.JobStateCancelling {
			t.Errorf("the unrecorded job %s is still live at the API (%s)", j.Name, j.State)
		}
	}
	if !strings.Contains(logged.String(), "was cancelled at the API") {
		t.Errorf("logged %q: want the cancel said", logged.String())
	}
}
