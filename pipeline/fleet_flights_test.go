package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// flightFleet is the answer cache and the answer flights of a fleet of
// claimViews, as store/postgres keeps them: an answer is kept by the
// fenced commit that applies it, and that commit ends its worker's
// flight of the key, applied or fenced off.
type flightFleet struct {
	*claimStore
	clock   pipeline.Clock
	fmu     sync.Mutex
	answers map[string]pipeline.Result
	flights map[string]flightRow
	taken   int // flights taken, counting a holder's takes again
}

type flightRow struct {
	owner string
	until time.Time
}

// flightView is one worker's handle on a flightFleet.
type flightView struct {
	*claimView
	fleet *flightFleet
}

var (
	_ pipeline.AnswerCache   = (*flightView)(nil)
	_ pipeline.AnswerFlights = (*flightView)(nil)
)

func (v *flightView) CachedAnswer(stage, key string) (pipeline.Result, bool, error) {
	v.fleet.fmu.Lock()
	defer v.fleet.fmu.Unlock()
	res, ok := v.fleet.answers[stage+"\x00"+key]
	return res, ok, nil
}

func (v *flightView) TakeFlight(_ context.Context, stage, key string, lease time.Duration) (bool, error) {
	f := v.fleet
	f.fmu.Lock()
	defer f.fmu.Unlock()
	now := f.clock.Now()
	if row, ok := f.flights[stage+"\x00"+key]; ok && row.owner != v.name && row.until.After(now) {
		return false, nil
	}
	f.flights[stage+"\x00"+key] = flightRow{owner: v.name, until: now.Add(lease)}
	f.taken++
	return true, nil
}

func (v *flightView) LandFlight(_ context.Context, stage, key string) error {
	f := v.fleet
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.flights[stage+"\x00"+key].owner == v.name {
		delete(f.flights, stage+"\x00"+key)
	}
	return nil
}

func (v *flightView) CommitFenced(ctx context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	f := v.fleet
	// One lock over the commit and its answers, as one transaction.
	f.fmu.Lock()
	defer f.fmu.Unlock()
	rejected, err := v.claimView.CommitFenced(ctx, ts)
	if err != nil {
		return nil, err
	}
	fenced := map[uint64]bool{}
	for _, s := range rejected {
		fenced[s] = true
	}
	for _, t := range ts {
		if t.Outcome != pipeline.Succeeded || t.CacheKey == "" || t.Cached {
			continue
		}
		k := t.Stage + "\x00" + t.CacheKey
		if _, ok := f.answers[k]; !ok && !fenced[t.Seq] {
			f.answers[k] = t.Result
		}
		if f.flights[k].owner == v.name {
			delete(f.flights, k)
		}
	}
	return rejected, nil
}

// newFlightFleet is n items at stage "api" whose texts cycle through
// texts, and a view per worker name.
func newFlightFleet(clock *virtualClock, n int, texts []string, workers ...string) (*flightFleet, []*flightView) {
	st := newClaimStore([]string{"api"}, n, clock.Now)
	for i := range n {
		id := fmt.Sprintf("i%04d", i)
		st.records[id] = pipeline.Record{ID: id, Text: texts[i%len(texts)]}
	}
	f := &flightFleet{claimStore: st, clock: clock, answers: map[string]pipeline.Result{}, flights: map[string]flightRow{}}
	var views []*flightView
	for _, w := range workers {
		views = append(views, &flightView{claimView: st.view(w), fleet: f})
	}
	return f, views
}

// runFlightFleet runs one runner per view, each with stage and workers
// goroutines retrying on newBackOff, on clock, with a lease of a minute,
// and returns their summaries.
func runFlightFleet(t *testing.T, clock *virtualClock, views []*flightView, stage pipeline.Stage, workers int, newBackOff func() backoff.BackOff) []pipeline.RunSummary {
	t.Helper()
	sums := make([]pipeline.RunSummary, len(views))
	var wg sync.WaitGroup
	for i, v := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &pipeline.Runner{Store: v, Clock: clock, Lease: time.Minute,
				Stages: []pipeline.StageConfig{{Stage: stage, Workers: workers, NewBackOff: newBackOff}}}
			var err error
			if sums[i], err = r.Run(context.Background()); err != nil {
				t.Errorf("worker %s: %v", v.name, err)
			}
		}()
	}
	wg.Wait()
	return sums
}

// TestFleet_OneCallPerKeyAcrossWorkers: three workers drain 120 items of
// 6 distinct texts, each call taking 10 s of virtual time: every text is
// paid once in the fleet, every item is done, its duplicates answered
// from the cache or by another worker's flight, and no flight is left.
// When the first call for a text fails (a verdict on that item), its
// flight ends and a waiting worker buys the text: two calls for it.
func TestFleet_OneCallPerKeyAcrossWorkers(t *testing.T) {
	texts := []string{"great app", "too many ads", "crashes", "love it", "bad update", "fine"}
	for _, tc := range []struct {
		name     string
		failText string // the first call for this text fails
	}{
		{"every call answers", ""},
		{"the first buyer of a text fails", "crashes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				const n = 120
				f, views := newFlightFleet(clock, n, texts, "a", "b", "c")
				var mu sync.Mutex
				calls := map[string]int{}
				api := &keyedStage{version: "v1"}
				api.name = "api"
				api.fn = func(ctx context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
					mu.Lock()
					calls[it.Text]++
					first := calls[it.Text] == 1
					mu.Unlock()
					if err := clock.sleep(ctx, 10*time.Second); err != nil {
						return pipeline.Result{}, err
					}
					if first && it.Text == tc.failText {
						return pipeline.Result{}, verdict(errors.New("blocked"))
					}
					return answer(it), nil
				}
				sums := runFlightFleet(t, clock, views, api, 4, noWait)
				done, dead, _ := totals(sums, "api")
				var cached int64
				for _, s := range sums {
					cached += s.Stages["api"].Cached
				}
				for _, text := range texts {
					want := 1
					if text == tc.failText {
						want = 2
					}
					if calls[text] != want {
						t.Errorf("text %q called %d times in the fleet, want %d", text, calls[text], want)
					}
				}
				wantDead := int64(0)
				if tc.failText != "" {
					wantDead = 1
				}
				if done+dead != n || dead != wantDead || cached != n-int64(len(texts))-wantDead {
					t.Errorf("%d done, %d dead, %d cached; want %d items, %d dead, the rest of the duplicates cached", done, dead, cached, n, wantDead)
				}
				if len(f.flights) != 0 {
					t.Errorf("flights left behind: %v", f.flights)
				}
			})
		})
	}
}

// TestFleet_RetriesKeepTheFlight: the first buyer of a text fails twice
// (transient errors, 40 s apart on a one-minute lease) before it gets
// the answer; it renews its flight as it retries, so the other worker
// keeps waiting for its answer instead of buying the text itself.
func TestFleet_RetriesKeepTheFlight(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		f, views := newFlightFleet(clock, 8, []string{"same"}, "a", "b")
		var mu sync.Mutex
		calls := 0
		api := &keyedStage{version: "v1"}
		api.name = "api"
		api.fn = func(ctx context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n <= 2 {
				return pipeline.Result{}, errors.New("503 service unavailable")
			}
			return answer(it), nil
		}
		sums := runFlightFleet(t, clock, views, api, 2, func() backoff.BackOff { return backoff.NewConstantBackOff(40 * time.Second) })
		if done, _, _ := totals(sums, "api"); done != 8 || calls != 3 {
			t.Errorf("%d done, %d calls; want 8 done and 3 calls (two failures, one answer)", done, calls)
		}
		if len(f.flights) != 0 {
			t.Errorf("flights left behind: %v", f.flights)
		}
	})
}
