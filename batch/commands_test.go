package batch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// cancel runs Cancel on job num as `sawtooth batch cancel` does, on the
// fixture's clock, and returns how many items went back to the queue.
func (f *fixture) cancel(num uint64) (int, error) {
	res, err := Cancel(context.Background(), f.api, f.db, num, CancelConfig{Stage: f.cls, Now: f.clock.Now, Sleep: f.clock.Sleep})
	return res.Returned, err
}

// createAndStop runs the driver until its job is created, then stops it
// as a killed run stops: the job is left open, its items held.
func (f *fixture) createAndStop(t *testing.T) uint64 {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	d := f.driver(f.db, Config{Size: f.n})
	d.cfg.Sleep = func(context.Context, time.Duration) error { stop(); return context.Canceled }
	if _, err := d.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	jobs, err := f.db.BatchJobs(true)
	if err != nil || len(jobs) != 1 || jobs[0].Name == "" {
		t.Fatalf("open jobs %+v %v: want one created job", jobs, err)
	}
	return jobs[0].Num
}

// TestCancel_AsksTheAPIFirst cancels a job of 6 items in each state the
// API may report: only a job that ended with no results gives its items
// back; a succeeded one is collected; anything else changes nothing but
// the recorded state.
func TestCancel_AsksTheAPIFirst(t *testing.T) {
	cases := []struct {
		name string
		bc   geminisim.BatchConfig
		// after is how long the job ran before the cancel.
		after   time.Duration
		noStage bool
		// through, if set, carries the cancel's calls.
		through func(f *fixture) http.RoundTripper
		wantErr error
		// want is the result's figures; open whether the job stays open;
		// state the state recorded; cancels the simulator's count.
		want    CancelResult
		open    bool
		state   genai.JobState
		queued  int
		done    int
		cancels int
	}{
		{
			name: "succeeded while the run was down: collected, not re-queued", bc: geminisim.BatchConfig{Running: time.Minute}, after: time.Hour,
			want: CancelResult{Created: true, Collected: true, Answered: 6}, state: genai.JobStateSucceeded, done: 6,
		},
		{
			name: "succeeded and nothing can decode it: refused", bc: geminisim.BatchConfig{Running: time.Minute}, after: time.Hour, noStage: true,
			wantErr: ErrSucceeded, want: CancelResult{Created: true}, open: true, state: genai.JobStateSucceeded,
		},
		{
			name: "running: cancelled, items back once the API confirms", bc: geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}},
			want: CancelResult{Created: true, Returned: 6}, state: genai.JobStateCancelled, queued: 6, cancels: 1,
		},
		{
			name: "failed: items back, nothing to cancel", bc: geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateFail}}, after: time.Hour,
			want: CancelResult{Created: true, Returned: 6}, state: genai.JobStateFailed, queued: 6,
		},
		{
			name: "cancel accepted, not applied: items stay with the job", bc: geminisim.BatchConfig{Running: time.Hour},
			through: func(*fixture) http.RoundTripper { return &lateCancel{base: http.DefaultTransport, drop: true} },
			want:    CancelResult{Created: true, Unconfirmed: true}, open: true, state: genai.JobStateRunning,
		},
		{
			name: "another endpoint that does not know the job: refused", bc: geminisim.BatchConfig{Running: time.Hour},
			through: func(*fixture) http.RoundTripper { return &otherServer{base: http.DefaultTransport} },
			wantErr: ErrUnknownJob, want: CancelResult{Created: true}, open: true, state: genai.JobStateRunning,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 6, tc.bc)
			num := f.createAndStop(t)
			f.clock.Sleep(context.Background(), tc.after) //nolint:errcheck // a background context
			if tc.through != nil {
				f.through(t, tc.through(f))
			}
			cfg := CancelConfig{Stage: f.cls, Now: f.clock.Now, Sleep: f.clock.Sleep}
			if tc.noStage {
				cfg.Stage = nil
			}
			res, err := Cancel(context.Background(), f.api, f.db, num, cfg)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("cancel: %v, want %v", err, tc.wantErr)
			}
			if res.Created != tc.want.Created || res.Collected != tc.want.Collected || res.Unconfirmed != tc.want.Unconfirmed ||
				res.Answered != tc.want.Answered || res.Returned != tc.want.Returned {
				t.Errorf("result %+v, want %+v", res, tc.want)
			}
			rec, err := f.db.BatchJobByNum(num)
			if err != nil || rec.Open() != tc.open || rec.State != string(tc.state) {
				t.Errorf("record %+v %v: want open %v, state %s", rec, err, tc.open, tc.state)
			}
			if done, _, queued := f.state(t); done != tc.done || queued != tc.queued {
				t.Errorf("done %d, queued %d: want %d and %d", done, queued, tc.done, tc.queued)
			}
			if bs := f.sim.BatchStats(); bs.Cancels != tc.cancels {
				t.Errorf("the simulator ended %d live jobs by a cancel, want %d", bs.Cancels, tc.cancels)
			}
		})
	}
}

// otherServer is another endpoint with the same API: it knows no job.
type otherServer struct{ base http.RoundTripper }

func (o *otherServer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodPost {
		return answer(r, http.StatusNotFound, `{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND"}}`), nil
	}
	return o.base.RoundTrip(r)
}

// TestCancel_UnconfirmedThenSucceeded: a job whose cancel the API never
// applied finishes SUCCEEDED; cancelling again collects it, and no item
// is answered twice.
func TestCancel_UnconfirmedThenSucceeded(t *testing.T) {
	f := newFixture(t, 6, geminisim.BatchConfig{Running: time.Hour})
	num := f.createAndStop(t)
	f.through(t, &lateCancel{base: http.DefaultTransport, drop: true})
	cfg := CancelConfig{Stage: f.cls, Now: f.clock.Now, Sleep: f.clock.Sleep}
	if res, err := Cancel(context.Background(), f.api, f.db, num, cfg); err != nil || !res.Unconfirmed || res.Returned != 0 {
		t.Fatalf("first cancel: %+v %v", res, err)
	}
	f.clock.Sleep(context.Background(), 2*time.Hour) //nolint:errcheck // a background context
	res, err := Cancel(context.Background(), f.api, f.db, num, cfg)
	if err != nil || !res.Collected || res.Answered != 6 || res.Returned != 0 || res.Job.Open() {
		t.Fatalf("second cancel: %+v %v", res, err)
	}
	f.answeredOnce(t)
}

// legacyRecords reads job records as a sawtooth from before CreateSent
// was kept wrote them.
type legacyRecords struct{ *store.DB }

func (l legacyRecords) BatchJobByNum(num uint64) (pipeline.BatchJob, error) {
	j, err := l.DB.BatchJobByNum(num)
	j.CreateTracked = false
	return j, err
}

func (l legacyRecords) BatchJobs(openOnly bool) ([]pipeline.BatchJob, error) {
	jobs, err := l.DB.BatchJobs(openOnly)
	for i := range jobs {
		jobs[i].CreateTracked = false
	}
	return jobs, err
}

// TestCancel_IntentNeverCreated: an intent the API lists nowhere keeps
// its items until a create sent for it would have shown, counted from
// when that create was sent (as the driver counts it), then gives them
// back without any cancel. A 30-minute 429 backoff between the intent and
// the create must not make a create 10 s old look settled.
func TestCancel_IntentNeverCreated(t *testing.T) {
	const settle = 2 * time.Minute
	cases := []struct {
		name string
		// sentAfter is when the create was sent after the intent was
		// recorded (no create when negative); legacy reads the record as
		// an older sawtooth wrote it.
		sentAfter time.Duration
		legacy    bool
		// keptFor is how long after the intent its items stay (0: given
		// back at once).
		keptFor time.Duration
	}{
		{name: "no create was sent: closed at once", sentAfter: -1},
		{name: "create sent after a 30-minute backoff: kept until it settles", sentAfter: 30 * time.Minute, keptFor: 30*time.Minute + settle},
		{name: "a record from before the send time was kept: kept from the intent", sentAfter: -1, legacy: true, keptFor: settle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 4, geminisim.BatchConfig{})
			job, ok, err := f.db.ReserveBatch("classify", 10, f.clock.Now())
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			if tc.sentAfter >= 0 {
				f.clock.Sleep(context.Background(), tc.sentAfter) //nolint:errcheck // a background context
				if _, err := f.db.MarkBatchCreate(job.Num, 0, f.clock.Now()); err != nil {
					t.Fatal(err)
				}
			}
			// The create's answer was lost; the user cancels 10 s later.
			f.clock.Sleep(context.Background(), 10*time.Second) //nolint:errcheck // a background context
			var db Store = f.db
			if tc.legacy {
				db = legacyRecords{f.db}
			}
			cfg := CancelConfig{Stage: f.cls, Now: f.clock.Now, Sleep: f.clock.Sleep, CreateSettle: settle}
			res, err := Cancel(context.Background(), f.api, db, job.Num, cfg)
			if tc.keptFor > 0 {
				at := job.Created.Add(tc.keptFor)
				if err != nil || res.Created || !res.Unconfirmed || res.Returned != 0 || !res.Job.Open() || !res.RetryAt.Equal(at) {
					t.Fatalf("cancel: %+v %v: want its items kept until %s", res, err, at)
				}
				f.clock.Sleep(context.Background(), job.Created.Add(tc.keptFor).Sub(f.clock.Now())) //nolint:errcheck // a background context
				res, err = Cancel(context.Background(), f.api, db, job.Num, cfg)
			}
			if err != nil || res.Created || res.Unconfirmed || res.Returned != 4 || res.Job.Open() {
				t.Fatalf("cancel: %+v %v: want the 4 items back", res, err)
			}
			var out strings.Builder
			if err := WriteJobs(&out, []pipeline.BatchJob{res.Job}, f.clock.Now()); err != nil || !strings.Contains(out.String(), "NOT CREATED (closed)") {
				t.Errorf("list: %v\n%s", err, out.String())
			}
		})
	}
}

// TestDriver_ResumeAtAnotherEndpoint: a run resumed with another base URL
// polls each open job where it was created: the job created at the first
// endpoint answers every item there, none is closed for a 404 at the new
// one and sent again.
func TestDriver_ResumeAtAnotherEndpoint(t *testing.T) {
	f := newFixture(t, 6, geminisim.BatchConfig{Running: time.Minute})
	if err := f.db.SetBatchEndpoint(f.api.ClientConfig().HTTPOptions.BaseURL); err != nil {
		t.Fatal(err)
	}
	f.createAndStop(t)
	other := geminisim.New(geminisim.Config{Now: f.clock.Now, Seed: 7})
	url, err := other.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: url, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
	sum, err := f.driver(f.db, Config{Size: 6}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Returned != 0 || sum.Failed != 0 || sum.Succeeded != 1 || sum.Answered != 6 {
		t.Errorf("summary %+v: want the 6 answers of the job at its own endpoint, none returned", sum)
	}
	if bs := other.BatchStats(); bs.Created != 0 {
		t.Errorf("%d jobs created at the new endpoint, want 0", bs.Created)
	}
	f.answeredOnce(t)
}
