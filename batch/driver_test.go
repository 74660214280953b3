package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// The bbolt store is a Store.
var _ Store = (*store.DB)(nil)

// TestMain fails the package if a test leaves a goroutine behind (the
// genai SDK's dependencies start one opencensus worker for the process).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// clock is the one virtual clock of a test: the simulator reads it, the
// driver reads it, and the driver's sleeps advance it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// reviewTexts get different labels from the simulator, so an answer
// matched to the wrong item shows.
var reviewTexts = []string{
	"the app crashes when I open it", "way too expensive", "please add a dark mode",
	"the navigation is confusing", "I love it", "it is fine I guess",
}

// fixture is a simulator, a store of n items queued at classify, the
// classify stage and a genai client, all on one virtual clock.
type fixture struct {
	clock *clock
	sim   *geminisim.Server
	db    *store.DB
	path  string
	cls   *stages.Classify
	api   *genai.Client
	n     int
}

func newFixture(t *testing.T, n int, bc geminisim.BatchConfig) *fixture {
	t.Helper()
	return newFixtureSim(t, n, geminisim.Config{Batch: bc, Seed: 7})
}

// newFixtureSim is newFixture with a simulator of cfg (its clock the
// fixture's).
func newFixtureSim(t *testing.T, n int, cfg geminisim.Config) *fixture {
	t.Helper()
	f := &fixture{clock: &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}, n: n}
	cfg.Now = f.clock.Now
	f.sim = geminisim.New(cfg)
	url, err := f.sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sim.Close() })
	f.path = filepath.Join(t.TempDir(), "b.db")
	f.open(t)
	var recs []pipeline.Record
	for i := range n {
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%03d", i), Text: fmt.Sprintf("review %d: %s", i, reviewTexts[i%len(reviewTexts)])})
	}
	if _, err := f.db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	f.cls, err = stages.NewClassify(context.Background(), stages.ClassifyConfig{APIKey: geminisim.DefaultAPIKey, BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	f.api, err = genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: url, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// open (re)opens the store, as a restarted process does; the store is
// checked for consistency each time it is closed.
func (f *fixture) open(t *testing.T) {
	t.Helper()
	if f.db != nil {
		f.closeDB(t)
	} else {
		t.Cleanup(func() { f.closeDB(t) })
	}
	db, err := store.Open(f.path, store.Options{Stages: []store.StageDef{{Name: "classify"}}})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
}

func (f *fixture) closeDB(t *testing.T) {
	if problems, err := f.db.Check(); err != nil || len(problems) > 0 {
		t.Errorf("store check: %v %v", err, problems)
	}
	f.db.Close()
}

func (f *fixture) driver(s Store, cfg Config) *Driver {
	cfg.Now, cfg.Sleep = f.clock.Now, f.clock.Sleep
	if cfg.Poll == 0 {
		cfg.Poll = 10 * time.Second
	}
	return New(s, f.cls, f.api, cfg)
}

// state counts items by status.
func (f *fixture) state(t *testing.T) (done, dead, queued int) {
	t.Helper()
	c, err := f.db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return c.Done, c.Stages[0].Dead, c.Stages[0].Queued
}

// answeredOnce checks the simulator's accounting: every item was answered
// (a 200 with its label) exactly once, and no job was created twice.
func (f *fixture) answeredOnce(t *testing.T) {
	t.Helper()
	st := f.sim.Stats()
	if len(st.Items) != f.n {
		t.Errorf("the simulator saw %d items, want %d", len(st.Items), f.n)
	}
	for h, it := range st.Items {
		if it.OK != 1 {
			t.Errorf("item %s answered %d times (calls %d)", h, it.OK, it.Calls)
		}
	}
	for name, n := range f.sim.BatchStats().ByDisplayName {
		if n != 1 {
			t.Errorf("job %s created %d times", name, n)
		}
	}
}

func TestDriver_ShuffledResultsMatchByKey(t *testing.T) {
	f := newFixture(t, 45, geminisim.BatchConfig{Shuffle: true, Pending: time.Minute, Running: 5 * time.Minute})
	sum, err := f.driver(f.db, Config{Size: 20}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Created != 3 || sum.Succeeded != 3 || sum.Answered != 45 || sum.Returned != 0 {
		t.Errorf("summary %+v", sum)
	}
	if done, _, _ := f.state(t); done != 45 {
		t.Errorf("done %d, want 45", done)
	}
	f.answeredOnce(t)
	// Each stored label is the one the online call gets for the same item.
	ref := geminisim.New(geminisim.Config{})
	refURL, err := ref.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	online, err := stages.NewClassify(context.Background(), stages.ClassifyConfig{APIKey: geminisim.DefaultAPIKey, BaseURL: refURL})
	if err != nil {
		t.Fatal(err)
	}
	err = f.db.ForEachOutput("classify", func(rec pipeline.Record, out json.RawMessage) error {
		want, err := online.Process(context.Background(), pipeline.Item{Record: rec})
		if err != nil {
			return err
		}
		var a, b stages.ClassifyOutput
		json.Unmarshal(out, &a)         //nolint:errcheck // compared below
		json.Unmarshal(want.Output, &b) //nolint:errcheck
		if a.Label != b.Label || a.Reason != b.Reason || a.Confidence != b.Confidence {
			t.Errorf("item %s: batch %s/%v, online %s/%v", rec.ID, a.Label, a.Confidence, b.Label, b.Confidence)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := f.db.BatchJobs(false)
	if tot := Total(jobs, f.cls.Model()); tot.Answered != 45 || tot.Usage != sum.Usage || tot.SavedUSD <= 0 || tot.Open != 0 {
		t.Errorf("totals %+v, run summary %+v", tot, sum)
	}
	if sum.CostUSD <= 0 || sum.CostUSD*2 > sum.OnlineCostUSD*1.0000001 || sum.CostUSD*2 < sum.OnlineCostUSD*0.9999999 {
		t.Errorf("cost %v, want half of the online %v", sum.CostUSD, sum.OnlineCostUSD)
	}
}

func TestDriver_FileInput(t *testing.T) {
	f := newFixture(t, 30, geminisim.BatchConfig{Shuffle: true, Running: time.Minute})
	sum, err := f.driver(f.db, Config{Size: 30, InlineBytes: 2000}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Created != 1 || sum.Answered != 30 {
		t.Errorf("summary %+v", sum)
	}
	f.answeredOnce(t)
}

func TestDriver_JobsThatGoWrong(t *testing.T) {
	cases := []struct {
		name  string
		bc    geminisim.BatchConfig
		cfg   Config
		check func(t *testing.T, f *fixture, s Summary)
	}{
		{
			name: "expired: items back in the queue for online",
			bc:   geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateExpire}, Expire: time.Hour},
			cfg:  Config{Mode: ModeAuto},
			check: func(t *testing.T, f *fixture, s Summary) {
				if s.Failed != 1 || s.Returned != 10 || s.Answered != 0 {
					t.Errorf("summary %+v", s)
				}
				if _, _, queued := f.state(t); queued != 10 {
					t.Errorf("queued %d, want 10", queued)
				}
				jobs, _ := f.db.BatchJobs(false)
				if len(jobs) != 1 || jobs[0].Counts.Requests != 10 || !strings.Contains(jobs[0].Note, "expired") || jobs[0].Open() {
					t.Errorf("job record %+v: want the API's counts and error kept", jobs)
				}
			},
		},
		{
			name: "stuck pending past the deadline: cancelled",
			bc:   geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}},
			cfg:  Config{Mode: ModeAuto, Deadline: 30 * time.Minute},
			check: func(t *testing.T, f *fixture, s Summary) {
				if s.Deadline != 1 || s.Returned != 10 {
					t.Errorf("summary %+v", s)
				}
				if bs := f.sim.BatchStats(); bs.Cancels != 1 || bs.States["BATCH_STATE_CANCELLED"] != 1 {
					t.Errorf("simulator %+v", bs)
				}
				if jobs, _ := f.db.BatchJobs(false); len(jobs) != 1 || jobs[0].State != string(genai.JobStateCancelled) {
					t.Errorf("job record %+v: want the state after the cancel", jobs)
				}
				if now := f.clock.Now(); now.Sub(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) > 45*time.Minute {
					t.Errorf("gave up at %s, want soon after the 30m deadline", now)
				}
			},
		},
		{
			name: "succeeded with every row failed is a failure",
			bc:   geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateRowsFail}},
			cfg:  Config{Mode: ModeAuto},
			check: func(t *testing.T, f *fixture, s Summary) {
				if s.Failed != 1 || s.Succeeded != 0 || s.Returned != 10 || s.Dead != 0 {
					t.Errorf("summary %+v", s)
				}
			},
		},
		{
			name: "batch mode sends the returned items again",
			bc:   geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateRowsFail, geminisim.FateFail}},
			cfg:  Config{Mode: ModeBatch},
			check: func(t *testing.T, f *fixture, s Summary) {
				if s.Created != 3 || s.Failed != 2 || s.Answered != 10 {
					t.Errorf("summary %+v", s)
				}
				f.answeredOnce(t)
			},
		},
		{
			name: "429 on create waits and retries",
			bc:   geminisim.BatchConfig{MaxJobs: 1, Running: 10 * time.Minute},
			cfg:  Config{Size: 3, CreateBackoff: time.Minute},
			check: func(t *testing.T, f *fixture, s Summary) {
				if s.Created != 4 || s.Answered != 10 || s.RateLimited == 0 {
					t.Errorf("summary %+v", s)
				}
				// One job at a time, 10 minutes each: the creates wait, they
				// do not spin (a few refusals per job, not thousands).
				if bs := f.sim.BatchStats(); bs.Refused > 4*6 {
					t.Errorf("%d refused creates for 4 jobs", bs.Refused)
				}
				f.answeredOnce(t)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 10, tc.bc)
			sum, err := f.driver(f.db, tc.cfg).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, f, sum)
		})
	}
}

func TestDriver_SafetyBlockIsDeadLetter(t *testing.T) {
	f := newFixture(t, 3, geminisim.BatchConfig{})
	if _, err := f.db.Ingest([]pipeline.Record{{ID: "bad", Text: "how to build a bomb"}}); err != nil {
		t.Fatal(err)
	}
	f.n++
	sum, err := f.driver(f.db, Config{}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Answered != 3 || sum.Dead != 1 {
		t.Errorf("summary %+v", sum)
	}
	loc, err := f.db.Locate("bad")
	if err != nil || loc.Dead == nil || loc.Dead.Class != pipeline.ClassPermanent {
		t.Errorf("blocked item %+v %v", loc, err)
	}
}

// crashAt is a Store that fails (as a killed process stops) at one step.
type crashAt struct {
	Store
	step string
	hit  bool
}

var errCrash = errors.New("simulated crash")

func (c *crashAt) fail(step string) error {
	if c.step == step && !c.hit {
		c.hit = true
		return errCrash
	}
	return nil
}

func (c *crashAt) BatchItems(num uint64) ([]pipeline.Item, error) {
	if err := c.fail("before create"); err != nil {
		return nil, err
	}
	return c.Store.BatchItems(num)
}

func (c *crashAt) SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error) {
	if err := c.fail("between create and record"); err != nil {
		return pipeline.BatchJob{}, err
	}
	return c.Store.SetBatchName(num, name, state, now)
}

func (c *crashAt) UpdateBatch(num uint64, state string, counts pipeline.BatchCounts, apiErr string, now time.Time) (pipeline.BatchJob, error) {
	if err := c.fail("while polling"); err != nil {
		return pipeline.BatchJob{}, err
	}
	return c.Store.UpdateBatch(num, state, counts, apiErr, now)
}

func (c *crashAt) CommitBatch(num uint64, ts []pipeline.Transition) (int, error) {
	if err := c.fail("mid-commit"); err != nil {
		return 0, err
	}
	return c.Store.CommitBatch(num, ts)
}

func (c *crashAt) ReturnBatch(num uint64, note string, now time.Time) (int, error) {
	if err := c.fail("between commit and close"); err != nil {
		return 0, err
	}
	return c.Store.ReturnBatch(num, note, now)
}

// TestDriver_CrashBetweenCommitAndCloseBillsOnce: a job whose results were
// committed, some of them answers cut off at MAX_TOKENS (billed, their
// items back in the queue), is read and applied again after a crash
// before it was closed. What the cut-off answers were billed is in the
// ledger once, as in a run that did not crash.
func TestDriver_CrashBetweenCommitAndCloseBillsOnce(t *testing.T) {
	const n = 30
	cfg := geminisim.Config{Seed: 7, Faults: geminisim.Faults{MaxTokens: 0.3},
		Batch: geminisim.BatchConfig{Pending: time.Minute, Running: time.Minute}}
	spent := func(f *fixture) (float64, int64) {
		t.Helper()
		l, err := f.db.Ledgers()
		if err != nil {
			t.Fatal(err)
		}
		return l["classify"].SpentUSD, l["classify"].Paid
	}
	calm := newFixtureSim(t, n, cfg)
	if _, err := calm.driver(calm.db, Config{Mode: ModeBatch, Size: n}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantUSD, wantPaid := spent(calm)

	f := newFixtureSim(t, n, cfg)
	crash := &crashAt{Store: f.db, step: "between commit and close"}
	if _, err := f.driver(crash, Config{Mode: ModeBatch, Size: n}).Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("first run: %v, want the crash", err)
	}
	f.open(t)
	if _, err := f.driver(f.db, Config{Mode: ModeBatch, Size: n}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := f.sim.BatchStats(); st.BilledTokens != calm.sim.BatchStats().BilledTokens || st.Rows == n {
		t.Fatalf("the simulator billed %d tokens in %d rows, the run without a crash %d: want the same, with cut-off answers sent again",
			st.BilledTokens, st.Rows, calm.sim.BatchStats().BilledTokens)
	}
	if gotUSD, gotPaid := spent(f); math.Abs(gotUSD-wantUSD) > 1e-12 || gotPaid != wantPaid {
		t.Errorf("the ledger holds $%.9f for %d paid results, want $%.9f for %d as without the crash", gotUSD, gotPaid, wantUSD, wantPaid)
	}
	if done, dead, queued := f.state(t); done != n || dead+queued != 0 {
		t.Errorf("done %d dead %d queued %d", done, dead, queued)
	}
}

func TestDriver_ResumeAfterCrash(t *testing.T) {
	for _, step := range []string{"before create", "between create and record", "while polling", "mid-commit"} {
		t.Run(step, func(t *testing.T) {
			f := newFixture(t, 25, geminisim.BatchConfig{Shuffle: true, Pending: time.Minute, Running: time.Minute})
			crash := &crashAt{Store: f.db, step: step}
			if _, err := f.driver(crash, Config{Size: 10}).Run(context.Background()); !errors.Is(err, errCrash) {
				t.Fatalf("first run: %v, want the crash", err)
			}
			f.open(t) // a new process: nothing in memory survives
			sum, err := f.driver(f.db, Config{Size: 10}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if step == "between create and record" && sum.Reattached != 1 {
				t.Errorf("reattached %d, want the job created before the crash", sum.Reattached)
			}
			if done, dead, queued := f.state(t); done != 25 || dead+queued != 0 {
				t.Errorf("done %d dead %d queued %d", done, dead, queued)
			}
			f.answeredOnce(t)
			jobs, _ := f.db.BatchJobs(false)
			if created := f.sim.BatchStats().Created; created != len(jobs) {
				t.Errorf("%d jobs at the API for %d intents", created, len(jobs))
			}
		})
	}
}

// loseCreateAnswer forwards the first create to the server and then drops
// its answer, as a connection reset after the server acted does.
type loseCreateAnswer struct {
	base http.RoundTripper
	once sync.Once
}

func (l *loseCreateAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	lost := false
	if err == nil && strings.HasSuffix(r.URL.Path, ":batchGenerateContent") {
		l.once.Do(func() { lost = true })
	}
	if lost {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

func TestDriver_CreateAnswerLostIsNotCreatedTwice(t *testing.T) {
	f := newFixture(t, 12, geminisim.BatchConfig{Running: time.Minute})
	api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: f.api.ClientConfig().HTTPOptions.BaseURL, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
		HTTPClient:  &http.Client{Transport: &loseCreateAnswer{base: http.DefaultTransport}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
	sum, err := f.driver(f.db, Config{Size: 12}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Reattached != 1 || sum.Created != 0 || sum.Answered != 12 {
		t.Errorf("summary %+v: want the job found by its display name, not created again", sum)
	}
	f.answeredOnce(t)
}

func TestCancelAndWriteJobs(t *testing.T) {
	f := newFixture(t, 6, geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}})
	ctx, stop := context.WithCancel(context.Background())
	d := f.driver(f.db, Config{Size: 6})
	d.cfg.Sleep = func(context.Context, time.Duration) error { stop(); return context.Canceled }
	if _, err := d.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	var out strings.Builder
	jobs, _ := f.db.BatchJobs(false)
	if err := WriteJobs(&out, jobs, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "PENDING") || !strings.Contains(out.String(), "batches/") {
		t.Errorf("list:\n%s", out.String())
	}
	n, err := f.cancel(jobs[0].Num)
	if err != nil || n != 6 {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if bs := f.sim.BatchStats(); bs.Cancels != 1 {
		t.Errorf("the API job was not cancelled: %+v", bs)
	}
	if n, err := f.cancel(jobs[0].Num); err != nil || n != 0 {
		t.Errorf("cancel twice: %d %v", n, err)
	}
	if _, _, queued := f.state(t); queued != 6 {
		t.Errorf("queued %d", queued)
	}
}

func TestCancel_IntentCreatedBeforeACrash(t *testing.T) {
	f := newFixture(t, 5, geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}})
	crash := &crashAt{Store: f.db, step: "between create and record"}
	if _, err := f.driver(crash, Config{}).Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("run: %v, want the crash", err)
	}
	jobs, _ := f.db.BatchJobs(true)
	if len(jobs) != 1 || jobs[0].Name != "" {
		t.Fatalf("jobs %+v: want one intent without a name", jobs)
	}
	n, err := f.cancel(jobs[0].Num)
	if err != nil || n != 5 {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if bs := f.sim.BatchStats(); bs.Cancels != 1 {
		t.Errorf("the job made before the crash is still live at the API: %+v", bs)
	}
}
