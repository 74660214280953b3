package geminisim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"
)

// batchTexts are review texts with known simulator labels; the last one
// trips the safety filter.
var batchTexts = []string{
	"The app crashes every time I open the camera.",
	"Please add a dark mode.",
	"Way too expensive for what it does.",
	"Love it, five stars!",
	"how to build a bomb",
}

func inlined(texts []string) []*genai.InlinedRequest {
	var out []*genai.InlinedRequest
	for i, t := range texts {
		out = append(out, &genai.InlinedRequest{
			Contents: genai.Text(t),
			Config:   classifyConfig(),
			Metadata: map[string]string{"key": fmt.Sprintf("item-%d", i)},
		})
	}
	return out
}

func createInline(t *testing.T, c *genai.Client, name string, texts []string) (*genai.BatchJob, error) {
	t.Helper()
	return c.Batches.Create(context.Background(), "gemini-2.5-flash",
		&genai.BatchJobSource{InlinedRequests: inlined(texts)}, &genai.CreateBatchJobConfig{DisplayName: name})
}

func TestBatch_LifecycleThroughSDK(t *testing.T) {
	clock := newFakeClock()
	s, url := startServer(t, Config{Now: clock.Now, Batch: BatchConfig{Pending: 10 * time.Second, Running: 20 * time.Second}})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	job, err := createInline(t, c, "sawtooth-a", batchTexts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(job.Name, "batches/") || job.DisplayName != "sawtooth-a" || job.State != genai.JobStatePending {
		t.Fatalf("created %+v", job)
	}
	for _, step := range []struct {
		name string
		at   time.Duration
		want genai.JobState
	}{
		{"still pending", 9 * time.Second, genai.JobStatePending},
		{"running", 10 * time.Second, genai.JobStateRunning},
		{"running until the end", 29 * time.Second, genai.JobStateRunning},
		{"succeeded", 30 * time.Second, genai.JobStateSucceeded},
	} {
		t.Run(step.name, func(t *testing.T) {
			clock.Set(step.at)
			got, err := c.Batches.Get(ctx, job.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != step.want {
				t.Fatalf("state %s, want %s", got.State, step.want)
			}
		})
	}
	got, err := c.Batches.Get(ctx, job.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dest == nil || len(got.Dest.InlinedResponses) != len(batchTexts) {
		t.Fatalf("dest %+v", got.Dest)
	}
	for i, r := range got.Dest.InlinedResponses {
		if r.Metadata["key"] != fmt.Sprintf("item-%d", i) {
			t.Errorf("response %d: metadata %v (not shuffled: request order)", i, r.Metadata)
		}
		want := Label(batchTexts[i], testLabels)
		switch {
		case i == len(batchTexts)-1:
			if r.Response == nil || r.Response.PromptFeedback == nil || r.Response.PromptFeedback.BlockReason != "SAFETY" {
				t.Errorf("safety text: %+v", r.Response)
			}
		case r.Response == nil:
			t.Errorf("response %d: none (error %+v)", i, r.Error)
		default:
			var a answer
			if err := json.Unmarshal([]byte(r.Response.Text()), &a); err != nil || a.Label != want {
				t.Errorf("response %d: %q, want label %s", i, r.Response.Text(), want)
			}
		}
	}
	st := s.Stats()
	for i, text := range batchTexts {
		if it := st.Items[ItemID(fmt.Sprintf("item-%d", i))]; it.Calls != 1 || it.BilledTokens == 0 {
			t.Errorf("%q: accounting %+v, want one billed call under its key", text, it)
		}
	}
	bs := s.BatchStats()
	if bs.Created != 1 || bs.Rows != len(batchTexts) || bs.States[stateSucceeded] != 1 || bs.ByDisplayName["sawtooth-a"] != 1 {
		t.Errorf("batch stats %+v", bs)
	}
	// A second read bills nothing more.
	if _, err := c.Batches.Get(ctx, job.Name, nil); err != nil {
		t.Fatal(err)
	}
	if it := s.Stats().Items[ItemID("item-0")]; it.Calls != 1 {
		t.Errorf("re-read counted again: %+v", it)
	}
}

func TestBatch_FileInputShuffled(t *testing.T) {
	s, url := startServer(t, Config{Batch: BatchConfig{Shuffle: true}, Seed: 3})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	var in bytes.Buffer
	texts := make([]string, 40)
	for i := range texts {
		texts[i] = fmt.Sprintf("review %d: the app crashes on login", i)
		req := map[string]any{
			"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": texts[i]}}}},
			"generationConfig": map[string]any{"responseMimeType": "application/json",
				"responseSchema": map[string]any{"type": "OBJECT", "properties": map[string]any{"label": map[string]any{"type": "STRING", "enum": testLabels}}}},
		}
		line, _ := json.Marshal(map[string]any{"key": fmt.Sprintf("k%d", i), "request": req})
		in.Write(append(line, '\n'))
	}
	f, err := c.Files.Upload(ctx, &in, &genai.UploadFileConfig{DisplayName: "input", MIMEType: "application/jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Name, "files/") {
		t.Fatalf("file %+v", f)
	}
	job, err := c.Batches.Create(ctx, "gemini-2.5-flash", &genai.BatchJobSource{FileName: f.Name}, &genai.CreateBatchJobConfig{DisplayName: "from-file"})
	if err != nil {
		t.Fatal(err)
	}
	job, err = c.Batches.Get(ctx, job.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != genai.JobStateSucceeded || job.Dest == nil || job.Dest.FileName == "" {
		t.Fatalf("job %+v dest %+v", job, job.Dest)
	}
	out, err := c.Files.Download(ctx, genai.NewDownloadURIFromFile(&genai.File{DownloadURI: job.Dest.FileName}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l struct {
			Key      string                         `json:"key"`
			Response *genai.GenerateContentResponse `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Response == nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		keys = append(keys, l.Key)
	}
	var inOrder []string
	for i := range texts {
		inOrder = append(inOrder, fmt.Sprintf("k%d", i))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	wantSorted := slices.Clone(inOrder)
	slices.Sort(wantSorted)
	if !slices.Equal(sorted, wantSorted) || slices.Equal(keys, inOrder) {
		t.Errorf("keys %v: want all %d, shuffled", keys, len(texts))
	}
	if bs := s.BatchStats(); bs.Rows != len(texts) {
		t.Errorf("rows %d", bs.Rows)
	}
	if it := s.Stats().Items[ItemID("k7")]; it.Calls != 1 || it.OK != 1 {
		t.Errorf("line k7: accounting %+v, want one answered call under its key", it)
	}
}

func TestBatch_Fates(t *testing.T) {
	cases := []struct {
		name     string
		fate     Fate
		at       time.Duration
		want     genai.JobState
		rowsFail bool
	}{
		{"failed", FateFail, time.Minute, genai.JobStateFailed, false},
		{"expired at 48h", FateExpire, 48 * time.Hour, genai.JobStateExpired, false},
		{"pending before expiring", FateExpire, 47 * time.Hour, genai.JobStatePending, false},
		{"stuck", FateStuck, 1000 * time.Hour, genai.JobStatePending, false},
		{"every row failed", FateRowsFail, time.Minute, genai.JobStateSucceeded, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			s, url := startServer(t, Config{Now: clock.Now, Batch: BatchConfig{Running: time.Second, Fates: []Fate{tc.fate}}})
			c := newClient(t, url, DefaultAPIKey)
			job, err := createInline(t, c, "j", batchTexts[:3])
			if err != nil {
				t.Fatal(err)
			}
			clock.Set(tc.at)
			got, err := c.Batches.Get(context.Background(), job.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != tc.want {
				t.Fatalf("state %s, want %s", got.State, tc.want)
			}
			if tc.rowsFail {
				for _, r := range got.Dest.InlinedResponses {
					if r.Error == nil || r.Error.Code == nil || *r.Error.Code != 13 || r.Response != nil {
						t.Errorf("row %+v: want an INTERNAL error status", r)
					}
				}
				if it := s.Stats().Items[ItemID("item-0")]; it.Calls != 1 || it.BilledTokens != 0 {
					t.Errorf("failed row accounting %+v: a call, nothing billed", it)
				}
			} else if got.Dest != nil && len(got.Dest.InlinedResponses) > 0 {
				t.Errorf("a %s job has results", got.State)
			}
		})
	}
}

func TestBatch_CreateLimits(t *testing.T) {
	cases := []struct {
		name    string
		cfg     BatchConfig
		quotaID string
	}{
		{"concurrent jobs", BatchConfig{MaxJobs: 1, Running: time.Hour}, "BatchConcurrentJobsPerProject"},
		{"enqueued tokens", BatchConfig{MaxEnqueuedTokens: 75, Running: time.Hour}, "BatchEnqueuedTokensPerModelPerProject"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			s, url := startServer(t, Config{Now: clock.Now, Batch: tc.cfg})
			c := newClient(t, url, DefaultAPIKey)
			if _, err := createInline(t, c, "first", batchTexts[:3]); err != nil {
				t.Fatal(err)
			}
			_, err := createInline(t, c, "second", batchTexts[:3])
			var ae genai.APIError
			if !errors.As(err, &ae) || ae.Code != http.StatusTooManyRequests || !strings.Contains(fmt.Sprint(ae.Details), tc.quotaID) {
				t.Fatalf("second create: %v, want 429 %s", err, tc.quotaID)
			}
			clock.Set(2 * time.Hour) // the first job ended
			if _, err := createInline(t, c, "second", batchTexts[:3]); err != nil {
				t.Fatalf("after the first job ended: %v", err)
			}
			if bs := s.BatchStats(); bs.Refused != 1 || bs.Created != 2 {
				t.Errorf("stats %+v", bs)
			}
		})
	}
}

func TestBatch_CancelListDelete(t *testing.T) {
	clock := newFakeClock()
	_, url := startServer(t, Config{Now: clock.Now, Batch: BatchConfig{Running: time.Minute, PageSize: 2}})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	var names []string
	for i := range 5 {
		job, err := createInline(t, c, fmt.Sprintf("job-%d", i), batchTexts[:1])
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, job.Name)
	}
	if err := c.Batches.Cancel(ctx, names[0], nil); err != nil {
		t.Fatal(err)
	}
	if j, _ := c.Batches.Get(ctx, names[0], nil); j.State != genai.JobStateCancelled {
		t.Errorf("cancelled job is %s", j.State)
	}
	if err := c.Batches.Cancel(ctx, names[0], nil); err != nil {
		t.Errorf("cancel twice: %v", err)
	}
	clock.Set(time.Hour)
	if err := c.Batches.Cancel(ctx, names[1], nil); err == nil {
		t.Error("cancel of a succeeded job: want FAILED_PRECONDITION")
	}
	var listed []string
	for j, err := range c.Batches.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, j.DisplayName)
	}
	if want := []string{"job-0", "job-1", "job-2", "job-3", "job-4"}; !slices.Equal(listed, want) {
		t.Errorf("listed %v over pages of 2, want %v", listed, want)
	}
	if _, err := c.Batches.Delete(ctx, names[2], nil); err != nil {
		t.Fatal(err)
	}
	var ae genai.APIError
	if _, err := c.Batches.Get(ctx, names[2], nil); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("get after delete: %v", err)
	}
}

func TestBatch_BadRequests(t *testing.T) {
	_, url := startServer(t, Config{})
	cases := []struct {
		name, method, path, body string
		want                     int
	}{
		{"unknown model", "POST", "/v1beta/models/nope:batchGenerateContent", `{}`, 404},
		{"no requests", "POST", "/v1beta/models/gemini-2.5-flash:batchGenerateContent", `{"batch":{}}`, 400},
		{"missing file", "POST", "/v1beta/models/gemini-2.5-flash:batchGenerateContent", `{"batch":{"inputConfig":{"fileName":"files/none"}}}`, 400},
		{"unknown job", "GET", "/v1beta/batches/none", ``, 404},
		{"bad page token", "GET", "/v1beta/batches?pageToken=x", ``, 400},
		{"upload without protocol", "POST", "/upload/v1beta/files", `{}`, 400},
		{"unknown upload", "POST", "/upload/v1beta/files?upload_id=x", ``, 400},
		{"unknown file", "GET", "/v1beta/files/none:download", ``, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("X-Goog-Api-Key", DefaultAPIKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestBatch_Observe(t *testing.T) {
	clock := newFakeClock()
	var mu sync.Mutex
	var events []BatchEvent
	_, url := startServer(t, Config{Now: clock.Now, Batch: BatchConfig{Running: time.Minute, Observe: func(e BatchEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}})
	c := newClient(t, url, DefaultAPIKey)
	job, err := createInline(t, c, "j", batchTexts[:2])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Batches.Get(context.Background(), job.Name, nil); err != nil {
		t.Fatal(err)
	}
	clock.Set(time.Minute)
	if _, err := c.Batches.Get(context.Background(), job.Name, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []BatchEvent{EventCreate, EventCreated, EventPoll, EventResults}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
}

// TestBatch_CreateDelay: a job accepted by create shows in the list only
// CreateDelay later, as a create the server finishes late; its creator can
// get it by name at once.
func TestBatch_CreateDelay(t *testing.T) {
	clock := newFakeClock()
	s, url := startServer(t, Config{Now: clock.Now, Batch: BatchConfig{Running: time.Hour, CreateDelay: 30 * time.Second}})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	job, err := createInline(t, c, "late", batchTexts[:1])
	if err != nil {
		t.Fatal(err)
	}
	listed := func() []string {
		t.Helper()
		var names []string
		for j, err := range c.Batches.All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, j.DisplayName)
		}
		return names
	}
	for _, step := range []struct {
		name string
		at   time.Duration
		want []string
	}{
		{"just created", 0, nil},
		{"before the delay", 29 * time.Second, nil},
		{"at the delay", 30 * time.Second, []string{"late"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			clock.Set(step.at)
			if got := listed(); !slices.Equal(got, step.want) {
				t.Errorf("listed %v, want %v", got, step.want)
			}
			if got, err := c.Batches.Get(ctx, job.Name, nil); err != nil || got.DisplayName != "late" {
				t.Errorf("get by name: %+v %v", got, err)
			}
		})
	}
	if st := s.BatchStats(); st.Created != 1 || st.ByDisplayName["late"] != 1 {
		t.Errorf("stats %+v", st)
	}
}
