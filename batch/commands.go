package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// NewClient returns a Gemini API client for batch jobs: the SDK's retries
// off (the driver owns them) and no cap on response bodies, since a
// finished inlined job's answer and a responses file hold every answer.
// baseURL "" means $GOOGLE_GEMINI_BASE_URL, else Google's endpoint.
func NewClient(ctx context.Context, apiKey, baseURL string) (*genai.Client, error) {
	if strings.TrimSpace(apiKey) == "" {
		return nil, errors.New("batch: no Gemini API key: set GEMINI_API_KEY")
	}
	c, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey:  apiKey,
		Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{
			BaseURL:      baseURL,
			RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)},
		},
		HTTPClient: &http.Client{Timeout: 10 * time.Minute},
	})
	if err != nil {
		return nil, errors.New("batch: create Gemini client: check --base-url and GEMINI_API_KEY")
	}
	return c, nil
}

// WriteJobs writes one line per job: number, stage, state, API name, items,
// what came of them, age and note.
func WriteJobs(w io.Writer, jobs []store.BatchJob, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTAGE\tSTATE\tNAME\tITEMS\tANSWERED\tDEAD\tRETURNED\tIGNORED\tAGE\tNOTE")
	for _, j := range jobs {
		state := strings.TrimPrefix(j.State, "JOB_STATE_")
		switch {
		case j.Name == "":
			state = "INTENT"
		case !j.Open():
			state += " (closed)"
		}
		name := j.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", j.Num, j.Stage, state, name, len(j.Items),
			j.Answered, j.Dead, j.Returned, j.Ignored, now.Sub(j.Created).Round(time.Second), j.Note)
	}
	return tw.Flush()
}

// Canceller is the part of the API Cancel uses; *genai.Client's Batches
// field is one.
type Canceller interface {
	Cancel(ctx context.Context, name string, config *genai.CancelBatchJobConfig) error
	All(ctx context.Context) iter.Seq2[*genai.BatchJob, error]
}

// Cancel cancels job num at the API if it is live there, and returns the
// items it still holds to the queue. It returns how many items moved. A job
// already closed moves nothing. api may be nil for a job never created.
func Cancel(ctx context.Context, api Canceller, db Store, num uint64, now time.Time) (int, error) {
	job, err := db.BatchJobByNum(num)
	if err != nil {
		return 0, err
	}
	if !job.Open() {
		return 0, nil
	}
	names := []string{job.Name}
	if job.Name == "" && api != nil {
		// Only the intent is recorded, but a crash may have come after
		// the create: cancel whatever carries its display name.
		names = nil
		for j, err := range api.All(ctx) {
			if err != nil {
				return 0, fmt.Errorf("look for job %d (%s) at the API: %w (nothing changed; run again when the API answers)", num, job.DisplayName, err)
			}
			if j.DisplayName == job.DisplayName {
				names = append(names, j.Name)
			}
		}
	}
	for _, name := range names {
		if name == "" || api == nil {
			continue
		}
		err := api.Cancel(ctx, name, nil)
		var ae genai.APIError
		if err != nil && !(errors.As(err, &ae) && (ae.Code == http.StatusNotFound || ae.Code == http.StatusBadRequest)) {
			return 0, fmt.Errorf("cancel %s at the API: %w (nothing changed; run again when the API answers)", name, err)
		}
	}
	return db.ReturnBatch(num, "cancelled by the user", now)
}

// Totals is what a database's batch jobs did, for status and reports.
type Totals struct {
	// Jobs counts every job recorded; Open those still holding items.
	Jobs int `json:"jobs"`
	Open int `json:"open"`
	// Held is how many items open jobs hold now.
	Held int `json:"held"`
	// Answered, Dead, Returned and Ignored add up the jobs' counts.
	Answered int `json:"answered"`
	Dead     int `json:"dead"`
	Returned int `json:"returned"`
	Ignored  int `json:"ignored"`
	// Usage is the committed answers' billed tokens; CostUSD their price
	// at the batch rate, OnlineCostUSD at the online rate, SavedUSD the
	// difference.
	Usage         pipeline.Usage `json:"usage"`
	CostUSD       float64        `json:"cost_usd"`
	OnlineCostUSD float64        `json:"online_cost_usd"`
	SavedUSD      float64        `json:"saved_usd"`
}

// Total adds up jobs, priced for model.
func Total(jobs []store.BatchJob, model string) Totals {
	var t Totals
	for _, j := range jobs {
		t.Jobs++
		if j.Open() {
			t.Open++
			t.Held += len(j.Items) - j.Answered - j.Dead
		}
		t.Answered += j.Answered
		t.Dead += j.Dead
		t.Returned += j.Returned
		t.Ignored += j.Ignored
		t.Usage = t.Usage.Add(j.Usage)
	}
	in, out := stages.BatchPrice(model)
	oin, oout := stages.Price(model)
	t.CostUSD = (float64(t.Usage.PromptTokens)*in + float64(t.Usage.CandidateTokens)*out) / 1e6
	t.OnlineCostUSD = (float64(t.Usage.PromptTokens)*oin + float64(t.Usage.CandidateTokens)*oout) / 1e6
	t.SavedUSD = t.OnlineCostUSD - t.CostUSD
	return t
}
