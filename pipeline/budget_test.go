package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// pricedStage answers every item at a cost that varies with its text, and
// estimates its input as inFactor times the billed input (1: exact; 0.5:
// the estimate is half of what is billed, and the runner must calibrate).
type pricedStage struct {
	funcStage
	inFactor float64
	calls    atomic.Int64
	billed   atomic.Int64 // nanodollars at the test's price, summed by the fake
	price    pipeline.Price
	// failEvery, when > 0, makes every failEvery-th call a billed
	// failure (an off-schema answer), retried by the runner.
	failEvery int64
}

func (p *pricedStage) usage(it pipeline.Item) pipeline.Usage {
	n := int64(len(it.Text))
	out := 10 + (n*37)%50
	return pipeline.Usage{PromptTokens: 90 + n, CandidateTokens: out, TotalTokens: 90 + n + out}
}

func (p *pricedStage) EstimateInput(it pipeline.Item) int64 {
	return int64(float64(p.usage(it).PromptTokens) * p.inFactor)
}

func (p *pricedStage) MaxOutputTokens() int64 { return 64 }

func (p *pricedStage) Process(ctx context.Context, it pipeline.Item) (pipeline.Result, error) {
	n := p.calls.Add(1)
	u := p.usage(it)
	p.billed.Add(int64(p.price.Cost(u)*1e9 + 0.5))
	if p.failEvery > 0 && n%p.failEvery == 0 {
		return pipeline.Result{Usage: u}, errors.New("answer is not valid JSON")
	}
	return pipeline.Result{Output: []byte(`{"ok":true}`), Usage: u}, nil
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("review %d %s", i, "long text "[:i%10])
	}
	return out
}

var budgetMessage = regexp.MustCompile(`^budget \$5\.00 reached \(\$(\d+\.\d\d) spent, ([\d,]+) items left, about \$(\d+\.\d\d) more at this rate\): raise the run's budget to continue: run stopped early`)

// TestRunner_BudgetParks: the run stops starting calls when the next one
// would cross the budget, within one call's reservation of it (its input
// and the answer's cap) and never above;
// nothing in flight is lost; a higher budget resumes and pays no item
// twice.
func TestRunner_BudgetParks(t *testing.T) {
	// $1,000 and $2,000 per million tokens: each call costs about $0.13.
	price := pipeline.Price{InputPerM: 1000, OutputPerM: 2000}
	const items = 200
	tests := []struct {
		name      string
		workers   int
		inFactor  float64
		failEvery int64
	}{
		{"one worker, exact estimate", 1, 1, 0},
		{"8 workers, exact estimate", 8, 1, 0},
		{"64 workers, exact estimate", 64, 1, 0},
		{"64 workers, input estimated at half", 64, 0.5, 0},
		{"64 workers, input estimated at three times", 64, 3, 0},
		{"16 workers, every 5th call a billed failure", 16, 1, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newCachingMemStore([]string{"api"}, texts(items))
			api := &pricedStage{inFactor: tc.inFactor, price: price, failEvery: tc.failEvery}
			api.name = "api"
			run := func(budget float64) (pipeline.RunSummary, error) {
				r := &pipeline.Runner{Store: st, Budget: pipeline.Budget{RunUSD: budget},
					Stages: []pipeline.StageConfig{{Stage: api, Workers: tc.workers, Price: price, MaxAttempts: 10, NewBackOff: noWait}}}
				return r.Run(context.Background())
			}
			sum, err := run(5)
			if !errors.Is(err, pipeline.ErrStopped) {
				t.Fatalf("err = %v, want the budget stop", err)
			}
			m := budgetMessage.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("message %q does not match %s", err, budgetMessage)
			}
			s := sum.Stages["api"]
			spent := s.CostUSD
			billed := float64(api.billed.Load()) / 1e9
			// A call is reserved its input (calibrated: within a token of
			// what is billed) and the answer's cap, the most it can cost.
			var maxReserve float64
			for _, text := range texts(items) {
				u := api.usage(pipeline.Item{Record: pipeline.Record{Text: text}})
				maxReserve = max(maxReserve, price.Cost(pipeline.Usage{PromptTokens: u.PromptTokens + 1, CandidateTokens: api.MaxOutputTokens()}))
			}
			d := spent - billed
			switch {
			case spent > 5:
				t.Errorf("spent $%.6f, over the $5.00 budget", spent)
			case 5-spent > maxReserve:
				t.Errorf("spent $%.6f: stopped more than one call's reservation ($%.4f) short of $5.00", spent, maxReserve)
			case d > 1e-6 || d < -1e-6:
				t.Errorf("recorded spend $%.6f, the fake billed $%.6f", spent, billed)
			}
			if got := m[1]; got != strconv.FormatFloat(spent, 'f', 2, 64) {
				t.Errorf("message says $%s spent, the summary $%.4f", got, spent)
			}
			left, _ := st.QueuedThrough("api")
			if m[2] != strconv.Itoa(left) && m[2] != fmt.Sprintf("%d,%03d", left/1000, left%1000) {
				t.Errorf("message says %s items left, %d are queued", m[2], left)
			}
			if int(s.Done)+left != items {
				t.Errorf("done %d + queued %d != %d items: something in flight was lost", s.Done, left, items)
			}
			ledgers, _ := st.Ledgers()
			if d := ledgers["api"].SpentUSD - spent; d > 1e-6 || d < -1e-6 {
				t.Errorf("committed spend $%.6f, the run's $%.6f", ledgers["api"].SpentUSD, spent)
			}

			sum2, err := run(1000)
			if err != nil {
				t.Fatalf("resume with a higher budget: %v", err)
			}
			if done := s.Done + sum2.Stages["api"].Done; done != items {
				t.Errorf("done %d after the resume, want %d", done, items)
			}
			for id, n := range api.funcStage.calls {
				t.Errorf("item %s called through funcStage %d times", id, n)
			}
			if tc.failEvery == 0 && api.calls.Load() != items {
				t.Errorf("%d calls for %d items: an item was paid twice", api.calls.Load(), items)
			}
		})
	}
}

// TestRunner_BudgetTotal: the lifetime cap counts what earlier runs
// committed; a run that starts over it makes no call.
func TestRunner_BudgetTotal(t *testing.T) {
	price := pipeline.Price{InputPerM: 1000, OutputPerM: 2000}
	b := openTestStore(t, "bbolt", []string{"api"}, 0).(boltStore)
	ingest(t, b, 0, texts(100))
	api := &pricedStage{inFactor: 1, price: price}
	api.name = "api"
	run := func(total float64) (pipeline.RunSummary, error) {
		r := &pipeline.Runner{Store: b, Budget: pipeline.Budget{TotalUSD: total},
			Stages: []pipeline.StageConfig{{Stage: api, Workers: 8, Price: price, NewBackOff: noWait}}}
		return r.Run(context.Background())
	}
	if _, err := run(3); !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("first run: %v, want the budget stop", err)
	}
	calls := api.calls.Load()
	_, err := run(3)
	want := regexp.MustCompile(`^total budget \$3\.00 reached \(\$2\.\d\d spent in this database, \$0\.00 in this run, [\d,]+ items left, about \$\d+\.\d\d more at this rate\): raise the total budget to continue`)
	if !errors.Is(err, pipeline.ErrStopped) || !want.MatchString(err.Error()) || api.calls.Load() != calls {
		t.Fatalf("second run at the same cap: err %v, %d more calls; want no call and %s", err, api.calls.Load()-calls, want)
	}
	if _, err := run(100); err != nil {
		t.Fatal(err)
	}
	ledgers, err := b.Ledgers()
	if err != nil {
		t.Fatal(err)
	}
	if got, billed := ledgers["api"].SpentUSD, float64(api.billed.Load())/1e9; got-billed > 1e-6 || billed-got > 1e-6 || api.calls.Load() != 100 {
		t.Errorf("lifetime spend $%.6f, billed $%.6f, %d calls for 100 items", got, billed, api.calls.Load())
	}
}

// uncappedStage is a pricedStage that states no output cap, as a library
// user's stage may: a budget must still reserve an answer for it.
type uncappedStage struct{ pricedStage }

func (*uncappedStage) MaxOutputTokens() int64 { return 0 }

// TestRunner_BudgetReservesOutputWithoutCap: a priced stage that states no
// output cap is reserved fallback output tokens (1,024) before any answer
// is seen; a budget that covers the input but not that answer starts no
// call, instead of paying an answer it cannot afford.
func TestRunner_BudgetReservesOutputWithoutCap(t *testing.T) {
	// $1,000 and $2,000 per million tokens: ~100 input tokens are $0.10,
	// 1,024 output tokens $2.05.
	price := pipeline.Price{InputPerM: 1000, OutputPerM: 2000}
	tests := []struct {
		name      string
		budget    float64
		wantCalls bool
	}{
		{"a budget under input and 1,024 output tokens starts no call", 1, false},
		{"a budget over them calls", 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newCachingMemStore([]string{"api"}, texts(1))
			api := &uncappedStage{pricedStage{inFactor: 1, price: price}}
			api.name = "api"
			r := &pipeline.Runner{Store: st, Budget: pipeline.Budget{RunUSD: tc.budget},
				Stages: []pipeline.StageConfig{{Stage: api, Workers: 1, Price: price, NewBackOff: noWait}}}
			_, err := r.Run(context.Background())
			calls := api.calls.Load()
			switch {
			case tc.wantCalls && (err != nil || calls != 1):
				t.Fatalf("err = %v, %d calls; want the item answered by one call", err, calls)
			case !tc.wantCalls && (!errors.Is(err, pipeline.ErrStopped) || calls != 0):
				t.Fatalf("err = %v, %d calls; want the budget stop before any call", err, calls)
			}
		})
	}
}
