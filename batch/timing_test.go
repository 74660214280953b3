package batch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestDriver_AutoDeadlineIsTheRuns holds auto mode to one deadline for the
// whole run: with one live job allowed at the API and jobs that run past
// it, the run gives up on the batch at the deadline (it does not reserve
// the returned items into new jobs with deadlines of their own) and leaves
// every unanswered item in the queue for the online runner.
func TestDriver_AutoDeadlineIsTheRuns(t *testing.T) {
	const deadline = 20 * time.Second
	cases := []struct {
		name string
		bc   geminisim.BatchConfig
		// crashed is how long before the run an earlier run recorded
		// its first intent and died: the deadline counts from there.
		crashed time.Duration
		// wantAnswered by the batch; the rest must be queued.
		wantAnswered int
	}{
		{"every job runs past the deadline", geminisim.BatchConfig{MaxJobs: 1, Running: 10 * time.Minute}, 0, 0},
		// Jobs at 0s, 9s and 18s (429s in between), answered 5s after
		// create: the third is cancelled at 20s.
		{"jobs answer in turn until the deadline", geminisim.BatchConfig{MaxJobs: 1, Running: 5 * time.Second}, 0, 20},
		{"resumed: the deadline counts from the first intent", geminisim.BatchConfig{MaxJobs: 1, Running: 5 * time.Second}, 15 * time.Second, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 30, tc.bc)
			start := f.clock.Now()
			if tc.crashed > 0 {
				if _, ok, err := f.db.ReserveBatch("classify", 10, start); err != nil || !ok {
					t.Fatalf("reserve: %v %v", ok, err)
				}
				f.clock.Sleep(context.Background(), tc.crashed) //nolint:errcheck // virtual
			}
			d := f.driver(f.db, Config{Mode: ModeAuto, Size: 10, Deadline: deadline, Poll: time.Second, CreateBackoff: 3 * time.Second})
			// A run that never ends is stopped, in virtual time, well past
			// the deadline.
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			d.cfg.Sleep = func(ctx context.Context, wait time.Duration) error {
				if f.clock.Sleep(ctx, wait); f.clock.Now().Sub(start) > 10*deadline {
					stop()
				}
				return ctx.Err()
			}
			sum, err := d.Run(ctx)
			if err != nil {
				t.Fatalf("run: %v after %s of virtual time (summary %+v)", err, f.clock.Now().Sub(start), sum)
			}
			if took := f.clock.Now().Sub(start); took > deadline {
				t.Errorf("the batch phase took %s of virtual time, want it over by the %s deadline", took, deadline)
			}
			if sum.Answered != tc.wantAnswered {
				t.Errorf("answered %d, want %d (summary %+v)", sum.Answered, tc.wantAnswered, sum)
			}
			if done, dead, queued := f.state(t); done != tc.wantAnswered || dead != 0 || queued != 30-tc.wantAnswered {
				t.Errorf("done %d dead %d queued %d: want what the batch did not answer queued for online", done, dead, queued)
			}
			jobs, err := f.db.BatchJobs(false)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if j.Open() {
					t.Errorf("job %d still open after the run", j.Num)
				}
				if !j.Created.Before(start.Add(deadline)) {
					t.Errorf("job %d reserved at %s, past the run's deadline", j.Num, j.Created.Sub(start))
				}
			}
			if st := f.sim.BatchStats(); st.States["BATCH_STATE_PENDING"]+st.States["BATCH_STATE_RUNNING"] != 0 {
				t.Errorf("jobs left live at the API: %v", st.States)
			}
		})
	}
}

// dropFirstCreate fails the first create before it reaches the server, as
// a connection refused or reset before the request was sent.
type dropFirstCreate struct {
	base http.RoundTripper
	once sync.Once
}

func (d *dropFirstCreate) RoundTrip(r *http.Request) (*http.Response, error) {
	drop := false
	if strings.HasSuffix(r.URL.Path, ":batchGenerateContent") {
		d.once.Do(func() { drop = true })
	}
	if drop {
		return nil, errors.New("connection reset by peer")
	}
	return d.base.RoundTrip(r)
}

// TestDriver_LateCreateIsNotCreatedTwice: after a create whose outcome is
// unknown, a job the API lists only minutes later (the server finished
// the create after its client gave up) is re-attached, not created again;
// a create that never arrived is sent again once it would have shown.
func TestDriver_LateCreateIsNotCreatedTwice(t *testing.T) {
	const settle = 5 * time.Minute
	cases := []struct {
		name      string
		transport http.RoundTripper
		crash     bool // the first run dies between create and its record
		// wantCreated and wantReattached are the last run's.
		wantCreated, wantReattached int
	}{
		{"the create's answer is lost", &loseCreateAnswer{base: http.DefaultTransport}, false, 0, 1},
		{"killed before the create was recorded", nil, true, 0, 1},
		{"the create never reached the server", &dropFirstCreate{base: http.DefaultTransport}, false, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 12, geminisim.BatchConfig{Running: time.Minute, CreateDelay: 3 * time.Minute})
			start := f.clock.Now()
			if tc.transport != nil {
				api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
					APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
					HTTPOptions: genai.HTTPOptions{BaseURL: f.api.ClientConfig().HTTPOptions.BaseURL, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
					HTTPClient:  &http.Client{Transport: tc.transport},
				})
				if err != nil {
					t.Fatal(err)
				}
				f.api = api
			}
			cfg := Config{Size: 12, CreateBackoff: time.Minute, CreateSettle: settle}
			if tc.crash {
				crash := &crashAt{Store: f.db, step: "between create and record"}
				if _, err := f.driver(crash, cfg).Run(context.Background()); !errors.Is(err, errCrash) {
					t.Fatalf("first run: %v, want the crash", err)
				}
				f.open(t)
			}
			sum, err := f.driver(f.db, cfg).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if sum.Created != tc.wantCreated || sum.Reattached != tc.wantReattached || sum.Answered != 12 {
				t.Errorf("summary %+v: want %d created, %d re-attached, 12 answered", sum, tc.wantCreated, tc.wantReattached)
			}
			if done, _, _ := f.state(t); done != 12 {
				t.Errorf("done %d, want 12", done)
			}
			f.answeredOnce(t)
			if created := f.sim.BatchStats().Created; created != 1 {
				t.Errorf("%d jobs at the API, want 1", created)
			}
			if tc.wantCreated > 0 {
				jobs, _ := f.db.BatchJobs(false)
				if len(jobs) != 1 || jobs[0].Submitted.Sub(start) < settle {
					t.Errorf("jobs %+v: want the create sent again only once the lost one would have shown (%s)", jobs, settle)
				}
			}
		})
	}
}

// TestDriver_BatchRoundsEnd: in batch mode, jobs that never finish by the
// deadline give their items back; a round sends each item once, so the
// run ends after MaxRounds with every item queued for a later run instead
// of re-sending them in new jobs forever.
func TestDriver_BatchRoundsEnd(t *testing.T) {
	f := newFixture(t, 30, geminisim.BatchConfig{MaxJobs: 1, Running: 10 * time.Minute})
	start := f.clock.Now()
	d := f.driver(f.db, Config{Mode: ModeBatch, Size: 10, Deadline: 20 * time.Second, Poll: time.Second, CreateBackoff: 3 * time.Second, MaxRounds: 3})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	d.cfg.Sleep = func(ctx context.Context, wait time.Duration) error {
		if f.clock.Sleep(ctx, wait); f.clock.Now().Sub(start) > time.Hour {
			stop()
		}
		return ctx.Err()
	}
	sum, err := d.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v after %s of virtual time (summary %+v)", err, f.clock.Now().Sub(start), sum)
	}
	if done, dead, queued := f.state(t); done+dead != 0 || queued != 30 {
		t.Errorf("done %d dead %d queued %d, want every item queued", done, dead, queued)
	}
	jobs, err := f.db.BatchJobs(false)
	if err != nil {
		t.Fatal(err)
	}
	// Three rounds of three jobs of 10: each item in one job per round.
	if len(jobs) != 9 {
		t.Errorf("%d jobs reserved, want 9 (3 rounds of 30 items)", len(jobs))
	}
	for _, j := range jobs {
		if j.Open() {
			t.Errorf("job %d still open", j.Num)
		}
	}
}

// TestDriver_LegacyIntentWaitsBeforeCreating: an intent recorded by a
// sawtooth that did not keep the send time may have been created at any
// time since: the driver looks for it until the settle time after the
// intent before creating; one whose record proves no create was sent is
// created at once.
func TestDriver_LegacyIntentWaitsBeforeCreating(t *testing.T) {
	const settle = 5 * time.Minute
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			f := newFixture(t, 6, geminisim.BatchConfig{Running: time.Minute})
			job, ok, err := f.db.ReserveBatch("classify", 6, f.clock.Now())
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			var db Store = f.db
			want := job.Created
			if legacy {
				db, want = legacyRecords{f.db}, job.Created.Add(settle)
			}
			sum, err := f.driver(db, Config{Size: 6, CreateSettle: settle}).Run(context.Background())
			if err != nil || sum.Created != 1 || sum.Answered != 6 {
				t.Fatalf("run: %+v %v", sum, err)
			}
			rec, err := f.db.BatchJobByNum(job.Num)
			if err != nil || !rec.CreateSent.Equal(want) {
				t.Errorf("create sent at %s (%v), want %s", rec.CreateSent, err, want)
			}
			f.answeredOnce(t)
		})
	}
}

// heldCancel answers a cancel 200 at once and passes it on to the server
// only before the second look after it: the API applies it late.
type heldCancel struct {
	base  http.RoundTripper
	mu    sync.Mutex
	held  *http.Request
	looks int
}

func (h *heldCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if strings.HasSuffix(r.URL.Path, ":cancel") {
		h.held, h.looks = r.Clone(r.Context()), 0
		return answer(r, http.StatusOK, `{}`), nil
	}
	if h.held != nil && r.Method == http.MethodGet {
		if h.looks++; h.looks == 2 {
			resp, err := h.base.RoundTrip(h.held.WithContext(r.Context()))
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			h.held = nil
		}
	}
	return h.base.RoundTrip(r)
}

// TestDriver_AutoDeadlineCancelConfirmedLater: in auto mode a job created
// late (its intent from a run 20 minutes earlier) is cancelled at the
// run's deadline, before its own; the API confirms the cancel at a later
// look: it counts as past the deadline, not as a job that failed.
func TestDriver_AutoDeadlineCancelConfirmedLater(t *testing.T) {
	f := newFixture(t, 6, geminisim.BatchConfig{Running: time.Hour})
	if _, ok, err := f.db.ReserveBatch("classify", 6, f.clock.Now()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	f.clock.Sleep(context.Background(), 20*time.Minute) //nolint:errcheck // a background context
	f.through(t, &heldCancel{base: http.DefaultTransport})
	sum, err := f.driver(f.db, Config{Mode: ModeAuto, Size: 6, Deadline: 30 * time.Minute}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Deadline != 1 || sum.Failed != 0 || sum.Returned != 6 {
		t.Errorf("summary %+v: want the job counted past the deadline, its 6 items returned", sum)
	}
	jobs, _ := f.db.BatchJobs(false)
	if len(jobs) != 1 || !strings.Contains(jobs[0].Note, "past the deadline") {
		t.Errorf("jobs %+v: want the note to say past the deadline", jobs)
	}
}
