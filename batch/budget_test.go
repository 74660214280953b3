package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// simBill is what the simulator billed for batch answers, in USD at the
// batch price: each item's prompt and answer tokens (every item is
// answered at most once here; answeredOnce checks it).
func simBill(f *fixture) float64 {
	in, out := stages.BatchPrice(f.cls.Model())
	var usd float64
	for _, it := range f.sim.Stats().Items {
		if it.BilledTokens > 0 {
			usd += (float64(it.PromptTokens)*in + float64(it.BilledTokens-it.PromptTokens)*out) / 1e6
		}
	}
	return usd
}

// perItem is the reservation of one request of the fixture's items.
func perItem(t *testing.T, f *fixture) float64 {
	t.Helper()
	items, err := f.db.Queued("classify", 0, 1)
	if err != nil || len(items) == 0 {
		t.Fatalf("queued: %v %v", items, err)
	}
	d := f.driver(f.db, Config{Budget: pipeline.Budget{RunUSD: 1}})
	if err := d.startPurse(); err != nil {
		t.Fatal(err)
	}
	return d.estimate(items[0].Item).USD()
}

// TestDriver_BudgetStopsCreatingJobs: with a budget for 12 items'
// reservations in jobs of 10 (a request is reserved its output cap, about
// 7 times what the simulator's answers cost), jobs are created while
// their estimated cost fits, waiting for those in flight to settle and
// leave room (so more than 12 items are answered), then one last job
// with what fits, none past it; the simulator's bill stays within the
// budget; the run stops as a BudgetError (ErrStopped) with the items left
// queued; a run with a higher budget finishes them, each answered once.
func TestDriver_BudgetStopsCreatingJobs(t *testing.T) {
	cases := []struct {
		name   string
		budget func(usd float64) pipeline.Budget
		total  bool
	}{
		{"run", func(usd float64) pipeline.Budget { return pipeline.Budget{RunUSD: usd} }, false},
		{"total", func(usd float64) pipeline.Budget { return pipeline.Budget{TotalUSD: usd} }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const n = 60
			f := newFixture(t, n, geminisim.BatchConfig{Shuffle: true, Pending: time.Minute})
			budget := 12 * perItem(t, f)
			sum, err := f.driver(f.db, Config{Size: 10, Budget: tc.budget(budget)}).Run(context.Background())
			var be *BudgetError
			if !errors.As(err, &be) || !errors.Is(err, pipeline.ErrStopped) || be.Total != tc.total {
				t.Fatalf("run: %v, want a BudgetError (total %v) that is ErrStopped", err, tc.total)
			}
			bill := simBill(f)
			if bill > budget || sum.CostUSD > budget || bill <= 0 {
				t.Errorf("the simulator billed $%.6f, the run counted $%.6f: want both within the budget $%.6f", bill, sum.CostUSD, budget)
			}
			done, _, queued := f.state(t)
			if done <= 12 || queued == 0 || done+queued != n || be.Left != queued {
				t.Errorf("done %d, queued %d, stop %+v: want more than 12 answered within the budget, the rest queued and named", done, queued, be)
			}
			if ledgers, _ := f.db.Ledgers(); ledgers["classify"].SpentUSD > budget {
				t.Errorf("the ledger spent $%.6f, over the budget $%.6f", ledgers["classify"].SpentUSD, budget)
			}

			f.open(t)
			more := tc.budget(10 * n * perItem(t, f))
			if _, err := f.driver(f.db, Config{Size: 10, Budget: more}).Run(context.Background()); err != nil {
				t.Fatalf("resumed with a higher budget: %v", err)
			}
			if done, _, queued := f.state(t); done != n || queued != 0 {
				t.Errorf("after the resume: done %d, queued %d", done, queued)
			}
			f.answeredOnce(t)
		})
	}
}

// TestDriver_BudgetHeldAcrossACrash: a run killed after its job's create
// was sent (its answer never recorded) leaves a job that may be billed;
// the next run under the same lifetime cap counts its reservation before
// creating more, so the simulator's whole bill stays within the cap.
func TestDriver_BudgetHeldAcrossACrash(t *testing.T) {
	const n = 40
	// At each create, what the jobs that may be billed reserved plus what
	// was spent stays within the cap.
	var (
		mu     sync.Mutex
		db     *store.DB
		budget pipeline.Budget
		over   []string
	)
	observe := func(ev geminisim.BatchEvent) {
		if ev != geminisim.EventCreate {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		jobs, err := db.BatchJobs(true)
		ledgers, lerr := db.Ledgers()
		if err != nil || lerr != nil {
			over = append(over, fmt.Sprint(err, lerr))
			return
		}
		held := ledgers["classify"].SpentUSD
		for _, j := range jobs {
			held += j.ReservedUSD
		}
		if held > budget.TotalUSD {
			over = append(over, fmt.Sprintf("$%.6f spent and reserved by %d open jobs at a create, over the cap $%.6f", held, len(jobs), budget.TotalUSD))
		}
	}
	f := newFixture(t, n, geminisim.BatchConfig{Pending: time.Minute, Observe: observe})
	mu.Lock()
	db, budget = f.db, pipeline.Budget{TotalUSD: 6 * perItem(t, f)}
	mu.Unlock()
	crash := &crashAt{Store: f.db, step: "between create and record"}
	if _, err := f.driver(crash, Config{Size: 20, Budget: budget}).Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("first run: %v, want the crash", err)
	}
	jobs, err := f.db.BatchJobs(true)
	if err != nil || len(jobs) != 1 || jobs[0].ReservedUSD <= 0 {
		t.Fatalf("open jobs %+v %v: want the one created, with its reservation recorded", jobs, err)
	}
	f.open(t)
	mu.Lock()
	db = f.db
	mu.Unlock()
	sum, err := f.driver(f.db, Config{Size: 20, Budget: budget}).Run(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for _, o := range over {
		t.Error(o)
	}
	var be *BudgetError
	if !errors.As(err, &be) || !be.Total {
		t.Fatalf("resumed run: %v, want the total budget's stop", err)
	}
	if sum.Reattached != 1 {
		t.Errorf("summary %+v: want the job created before the crash re-attached", sum)
	}
	if bill := simBill(f); bill > budget.TotalUSD {
		t.Errorf("the simulator billed $%.6f, over the lifetime budget $%.6f", bill, budget.TotalUSD)
	}
	for h, it := range f.sim.Stats().Items {
		if it.OK > 1 {
			t.Errorf("item %s answered %d times", h, it.OK)
		}
	}
	if created := f.sim.BatchStats().Created; created != len(mustJobs(t, f)) {
		t.Errorf("%d jobs at the API, %d recorded: one created twice", created, len(mustJobs(t, f)))
	}
}

func mustJobs(t *testing.T, f *fixture) []pipeline.BatchJob {
	t.Helper()
	jobs, err := f.db.BatchJobs(false)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// TestDriver_BudgetHoldsAJobOpenedWithoutOne: a job created by a run with
// no budget recorded no reservation; a later run with a budget reserves
// its items' estimate before creating more, so the simulator's bill stays
// within the budget. The budget is exactly what that job's answers cost
// (measured on a twin fixture): any job created before its results came
// back would cross it.
func TestDriver_BudgetHoldsAJobOpenedWithoutOne(t *testing.T) {
	const old, n = 30, 50
	twin := newFixture(t, old, geminisim.BatchConfig{Pending: time.Minute})
	if _, err := twin.driver(twin.db, Config{Size: old}).Run(context.Background()); err != nil {
		t.Fatalf("twin run: %v", err)
	}
	budget := simBill(twin)
	f := newFixture(t, old, geminisim.BatchConfig{Pending: time.Minute})
	if r := perItem(t, f); budget < 2*r {
		t.Fatalf("the old job's answers cost $%.6f, under two requests' reservation $%.6f: a later job could not fit anyway", budget, 2*r)
	}
	ctx, stop := context.WithCancel(context.Background())
	first := f.driver(f.db, Config{Size: old})
	first.cfg.Sleep = func(context.Context, time.Duration) error { stop(); return context.Canceled }
	if _, err := first.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v", err)
	}
	if jobs := mustJobs(t, f); len(jobs) != 1 || jobs[0].Name == "" || jobs[0].ReservedUSD != 0 || len(jobs[0].Items) != old {
		t.Fatalf("jobs %+v: want one created job of %d items with nothing reserved", jobs, old)
	}
	// Items ingested since, for the run with a budget to create jobs of.
	var recs []pipeline.Record
	for i := old; i < n; i++ {
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%03d", i), Text: fmt.Sprintf("review %d: %s", i, reviewTexts[i%len(reviewTexts)])})
	}
	if _, err := f.db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	f.open(t)
	// Jobs of one item: a whole job fits beside a job that reserved
	// nothing (a job cut short by the budget waits for those in flight).
	_, err := f.driver(f.db, Config{Size: 1, Budget: pipeline.Budget{RunUSD: budget}}).Run(context.Background())
	var be *BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("run with a budget: %v, want its stop", err)
	}
	if bill := simBill(f); bill > budget+1e-9 {
		t.Errorf("the simulator billed $%.6f, over the budget $%.6f (%d jobs created)", bill, budget, f.sim.BatchStats().Created)
	}
	if done, _, queued := f.state(t); done != old || queued != n-old || be.Left != n-old {
		t.Errorf("done %d, queued %d, stop %+v: want the old job's %d answered and the %d new items left queued", done, queued, be, old, n-old)
	}
}
