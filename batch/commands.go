package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
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
		return nil, &ClientError{Err: err}
	}
	return c, nil
}

// ClientError is a Gemini client NewClient could not create: the
// endpoint's address or the API key is wrong.
type ClientError struct{ Err error }

func (e *ClientError) Error() string { return e.Text("check the endpoint's address and the API key") }

// Text is the error's message with remedy as what to check.
func (e *ClientError) Text(remedy string) string {
	return fmt.Sprintf("batch: create Gemini client (%v): %s", e.Err, remedy)
}

func (e *ClientError) Unwrap() error { return e.Err }

// WriteJobs writes one line per job: number, stage, state, API name, items,
// what came of them, age and note.
func WriteJobs(w io.Writer, jobs []pipeline.BatchJob, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTAGE\tSTATE\tNAME\tITEMS\tANSWERED\tDEAD\tRETURNED\tIGNORED\tAGE\tNOTE")
	for _, j := range jobs {
		state := strings.TrimPrefix(j.State, "JOB_STATE_")
		switch {
		case j.Name == "" && j.Open():
			state = "INTENT"
		case j.Name == "":
			state = "NOT CREATED (closed)"
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

// CancelConfig configures Cancel. Zero fields take the defaults below.
type CancelConfig struct {
	// Stage decodes the results of a job found SUCCEEDED, as a run does;
	// nil refuses to touch such a job (its answers are paid for).
	Stage Stage
	// Price and MaxSends are the stage's, as Config's: what its answers
	// cost in the ledger, and when an item a job failed again goes to
	// the dead letters (zero: the list price, DefaultMaxSends).
	Price    pipeline.Price
	MaxSends int
	// Looks is how many times the job is looked at after the cancel
	// (default DefaultCancelLooks), Every apart (DefaultCancelEvery),
	// waiting for the API to confirm it ended.
	Looks int
	Every time.Duration
	// CreateSettle is how long after its create was sent a job the API
	// lists nowhere may still appear (a create in flight when the run
	// stopped lands late), as Config.CreateSettle is the driver's: before
	// then its items stay with it. Default DefaultCreateSettle.
	CreateSettle time.Duration
	// Now and Sleep are the clock; nil means the real one.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Log receives what the Driver logs while collecting; nil discards.
	Log *slog.Logger
}

// Defaults for CancelConfig's zero fields: the API cancels asynchronously,
// usually within seconds.
const (
	DefaultCancelLooks = 5
	DefaultCancelEvery = 2 * time.Second
)

// CancelResult is what Cancel did with one job.
type CancelResult struct {
	// Job is the job's record afterwards.
	Job pipeline.BatchJob
	// State is what the API reported last; "" for a job it never had.
	State genai.JobState
	// Created is false for an intent the API never had.
	Created bool
	// Collected is set when the job had SUCCEEDED: its results were
	// committed as a run commits them (Answered outputs, Dead dead
	// letters) instead of cancelling it.
	Collected      bool
	Answered, Dead int
	// Returned counts the items put back in the queue.
	Returned int
	// Unconfirmed is set when the API accepted the cancel but still
	// reported the job live at the last look, or (Created false) when an
	// intent is listed nowhere yet but a late create may still show up
	// until RetryAt: its items stay with the job, which a later Cancel or
	// run collects or closes.
	Unconfirmed bool
	RetryAt     time.Time
}

// ErrSucceeded is returned by Cancel for a job that SUCCEEDED at the API
// when no CancelConfig.Stage can decode its results: nothing changed.
var ErrSucceeded = errors.New("the job succeeded at the API: its answers are paid for")

// Cancel stops job num without paying for its items twice. It asks the API
// for the job's state first: a SUCCEEDED job has its results collected
// (cfg.Stage decodes them; without one Cancel refuses with ErrSucceeded);
// a FAILED, CANCELLED or EXPIRED one, or an intent the API has not listed
// once a create sent for it would have shown (cfg.CreateSettle after the
// send), returns its items to the queue; a live one is cancelled and looked at
// again until the API confirms it ended, and only then are its items
// returned (or its results collected, if it finished first). A job the API
// does not know is refused: asking the wrong endpoint must not re-queue
// what the right one is answering. A job already closed is left as it is.
// The state the API last reported is recorded with the job. An error
// means nothing was committed but that state.
func Cancel(ctx context.Context, api *genai.Client, db Store, num uint64, cfg CancelConfig) (CancelResult, error) {
	if cfg.Looks <= 0 {
		cfg.Looks = DefaultCancelLooks
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultCancelEvery
	}
	if cfg.CreateSettle <= 0 {
		cfg.CreateSettle = DefaultCreateSettle
	}
	job, err := db.BatchJobByNum(num)
	if err != nil {
		return CancelResult{}, err
	}
	res := CancelResult{Job: job, State: genai.JobState(job.State), Created: job.Name != ""}
	if !job.Open() {
		return res, nil
	}
	if cfg.Stage != nil && cfg.Stage.Name() != job.Stage {
		return res, fmt.Errorf("batch job %d is at stage %s, not %s", num, job.Stage, cfg.Stage.Name())
	}
	d := New(db, cfg.Stage, api, Config{Now: cfg.Now, Sleep: cfg.Sleep, Log: cfg.Log, Price: cfg.Price, MaxSends: cfg.MaxSends})
	// The caller chose the endpoint to ask (--base-url, else the job's).
	d.clients[endpointKey(job.Endpoint)] = api
	t := &tracked{job: job}
	d.jobs[num] = t
	err = d.cancel(ctx, t, cfg, &res)
	if rec, rerr := db.BatchJobByNum(num); rerr == nil {
		res.Job = rec
	}
	res.Answered, res.Dead, res.Returned = d.sum.Answered, d.sum.Dead, d.sum.Returned
	return res, err
}

// cancel is Cancel's work on job t, filling res.
func (d *Driver) cancel(ctx context.Context, t *tracked, cfg CancelConfig, res *CancelResult) error {
	if t.job.Name == "" {
		found, err := d.findIntent(ctx, t)
		if err != nil {
			return err
		}
		if at := settledAt(t.job, cfg.CreateSettle); !found && d.cfg.Now().Before(at) {
			res.Unconfirmed, res.RetryAt = true, at
			return nil
		}
		if !found {
			return d.close(t, "cancelled by the user; it was never created at the API", d.cfg.Now())
		}
		res.Created = true
	}
	job, err := d.look(ctx, t)
	if err != nil {
		return err
	}
	if live(job.State) {
		err := d.apiFor(t).Batches.Cancel(ctx, t.job.Name, nil)
		var ae genai.APIError
		// A 400 says it ended meanwhile, as the next look shows.
		if err != nil && !(errors.As(err, &ae) && ae.Code == http.StatusBadRequest) {
			return fmt.Errorf("cancel %s at the API: %w (nothing changed; run again when the API answers)", t.job.Name, err)
		}
		for i := 0; i < cfg.Looks && live(job.State); i++ {
			if i > 0 {
				if err := d.cfg.Sleep(ctx, cfg.Every); err != nil {
					return err
				}
			}
			if job, err = d.look(ctx, t); err != nil {
				return err
			}
		}
	}
	res.State = job.State
	switch {
	case job.State == genai.JobStateSucceeded:
		if cfg.Stage == nil {
			return fmt.Errorf("batch job %d (%s): %w", t.job.Num, t.job.Name, ErrSucceeded)
		}
		rows, stray, err := d.results(ctx, d.apiFor(t), job)
		if err != nil {
			return fmt.Errorf("read the results of %s: %w (nothing changed; run again when the API answers)", t.job.Name, err)
		}
		res.Collected = true
		return d.apply(ctx, t, rows, stray, d.cfg.Now())
	case endedEmpty(job.State):
		return d.close(t, fmt.Sprintf("cancelled by the user; the API reported %s with no results", strings.TrimPrefix(string(job.State), "JOB_STATE_")), d.cfg.Now())
	}
	res.Unconfirmed = true
	return nil
}

// live reports whether a job in state s may still run and answer.
func live(s genai.JobState) bool {
	return s != genai.JobStateSucceeded && !endedEmpty(s)
}

// ErrUnknownJob is returned by Cancel when the API does not know a job
// recorded as created there: a wrong endpoint, or a job deleted there.
var ErrUnknownJob = errors.New("the API does not know the job")

// look reads job t at the API and records its state when it changed.
func (d *Driver) look(ctx context.Context, t *tracked) (*genai.BatchJob, error) {
	job, err := d.apiFor(t).Batches.Get(ctx, t.job.Name, nil)
	var ae genai.APIError
	switch {
	case errors.As(err, &ae) && ae.Code == http.StatusNotFound:
		return nil, fmt.Errorf("%s: %w", t.job.Name, ErrUnknownJob)
	case err != nil:
		return nil, fmt.Errorf("read the state of %s at the API: %w (nothing changed; run again when the API answers)", t.job.Name, err)
	}
	if string(job.State) != t.job.State {
		if t.job, err = d.db.UpdateBatch(t.job.Num, string(job.State), t.job.Counts, "", d.cfg.Now()); err != nil {
			return nil, err
		}
	}
	return job, nil
}

// findIntent looks for intent t's display name at the API and records the
// job found, as a run re-attaches it; false when the API has none. Other
// jobs with the name (created twice before a crash) are cancelled: only
// the recorded one's results are used.
func (d *Driver) findIntent(ctx context.Context, t *tracked) (bool, error) {
	var found []*genai.BatchJob
	for j, err := range d.apiFor(t).Batches.All(ctx) {
		if err != nil {
			return false, fmt.Errorf("look for job %d (%s) at the API: %w (nothing changed; run again when the API answers)", t.job.Num, t.job.DisplayName, err)
		}
		if j.DisplayName == t.job.DisplayName {
			found = append(found, j)
		}
	}
	if len(found) == 0 {
		return false, nil
	}
	for _, other := range found[1:] {
		if !live(other.State) {
			continue
		}
		if err := d.apiFor(t).Batches.Cancel(ctx, other.Name, nil); err != nil {
			d.cfg.Log.Warn("batch: cancel of a second job with the same display name failed", "job", t.job.Num, "name", other.Name, "err", err)
		}
	}
	submitted := found[0].CreateTime
	if submitted.IsZero() {
		submitted = d.cfg.Now()
	}
	rec, err := d.db.SetBatchName(t.job.Num, found[0].Name, string(found[0].State), submitted)
	if two := (*pipeline.TwoBatchJobsError)(nil); errors.As(err, &two) {
		d.cancelUnrecorded(ctx, t, found[0].Name)
	}
	if err != nil {
		return false, err
	}
	t.job = rec
	return true, nil
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

// Add is t and u added up (the totals of two sets of jobs).
func (t Totals) Add(u Totals) Totals {
	t.Jobs += u.Jobs
	t.Open += u.Open
	t.Held += u.Held
	t.Answered += u.Answered
	t.Dead += u.Dead
	t.Returned += u.Returned
	t.Ignored += u.Ignored
	t.Usage = t.Usage.Add(u.Usage)
	t.CostUSD += u.CostUSD
	t.OnlineCostUSD += u.OnlineCostUSD
	t.SavedUSD += u.SavedUSD
	return t
}

// Total adds up jobs, priced for model.
func Total(jobs []pipeline.BatchJob, model string) Totals {
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
