// This file keeps batch jobs within a budget, as the runner keeps online
// calls (pipeline.Budget): a job's estimated cost, at the batch price, is
// reserved before it is created and settled with what its answers were
// billed when they arrive. A job is paid whole once created and cannot
// be stopped part-way, so one whose reservation does not fit is not
// created: its items stay queued.
//
// The reservation is recorded with the create (pipeline.BatchJob.ReservedUSD,
// in the transaction that says the job may exist), so a run resumed after
// a kill counts what its open jobs may still cost; what they cost is
// committed to the ledger with their answers. A job created with no
// budget recorded none, and is held at its items' estimate instead.

package batch

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// fallbackOut is the output reserved per request of a stage that states
// no output cap, before any answer was seen (the runner's figure).
const fallbackOut = 1024

// BudgetError is a run stopped at its budget: the next job's estimated
// cost would have crossed a cap. It wraps pipeline.ErrStopped: the items
// left stay queued, and a run with a higher cap resumes.
type BudgetError struct {
	// Total is set when the cap is Budget.TotalUSD (the database's
	// lifetime spend), unset for Budget.RunUSD (this run's).
	Total bool
	// CapUSD is that cap; SpentUSD what this run's batch answers were
	// billed, and BeforeUSD the lifetime spend before this run (Total).
	CapUSD, SpentUSD, BeforeUSD float64
	// Left is the items still queued at the stage; PerItemUSD what each
	// is expected to cost at this run's rate (the reservation before any
	// answer); ReservedUSD what a request is reserved (its output at the
	// request's cap), which is why a budget admits fewer items per job
	// than it pays for.
	Left                    int
	PerItemUSD, ReservedUSD float64
}

func (e *BudgetError) Error() string {
	cap := "run"
	if e.Total {
		cap = "total"
	}
	return fmt.Sprintf("%s budget $%.4f reached: $%.4f spent by batch jobs in this run, %d items left (about $%.4f more): %v",
		cap, e.CapUSD, e.SpentUSD, e.Left, e.PerItemUSD*float64(e.Left), pipeline.ErrStopped)
}

func (e *BudgetError) Unwrap() error { return pipeline.ErrStopped }

// purse is the run's batch spend against Config.Budget (sums of
// nanodollars are exact). Reservations and spends round up, caps down.
type purse struct {
	budget pipeline.Budget
	// before is the lifetime spend committed before this run.
	before pipeline.NanoUSD
	// spent is what this run's batch answers were billed.
	spent pipeline.NanoUSD
	// reserved is each open job's reservation, by number.
	reserved map[uint64]pipeline.NanoUSD
	// estIn and in are the estimated and billed input tokens of the
	// requests answered: their ratio calibrates the estimate.
	estIn, in int64
	// outMax is the largest output billed, for a stage with no cap.
	outMax int64
}

// on reports whether the run has a cap.
func (p *purse) on() bool { return p.budget.RunUSD > 0 || p.budget.TotalUSD > 0 }

// fits reports whether a job reserving est keeps within every cap, with
// job num's own earlier reservation (if any) replaced by it.
func (p *purse) fits(num uint64, est pipeline.NanoUSD) bool {
	x := p.spent + est
	for n, r := range p.reserved {
		if n != num {
			x += r
		}
	}
	if p.budget.RunUSD > 0 && x > pipeline.NanoUSDDown(p.budget.RunUSD) {
		return false
	}
	return p.budget.TotalUSD <= 0 || p.before+x <= pipeline.NanoUSDDown(p.budget.TotalUSD)
}

// startPurse readies the purse: the lifetime spend so far counts against
// Budget.TotalUSD, and the jobs that may exist at the API (created, or a
// create sent) hold what they reserved, or the estimate of the items they
// hold when they reserved nothing.
func (d *Driver) startPurse() error {
	d.purse = purse{budget: d.cfg.Budget, reserved: map[uint64]pipeline.NanoUSD{}}
	if !d.purse.on() {
		return nil
	}
	if d.cfg.Budget.TotalUSD > 0 {
		ledgers, err := d.db.Ledgers()
		if err != nil {
			return fmt.Errorf("%w: read the spend so far: %w", errStore, err)
		}
		for _, l := range ledgers {
			d.purse.before += pipeline.NanoUSDUp(l.SpentUSD)
		}
	}
	for num, t := range d.jobs {
		if t.job.Name == "" && t.job.CreateSent.IsZero() {
			continue
		}
		est := pipeline.NanoUSDUp(t.job.ReservedUSD)
		if est == 0 {
			// Created by a run without a budget (or by a version before
			// budgets): it recorded no reservation, but its answers will
			// be billed all the same.
			items, err := d.db.BatchItems(num)
			if err != nil {
				return fmt.Errorf("%w: batch job %d: read its items to reserve their cost: %w", errStore, num, err)
			}
			for _, it := range items {
				est += d.estimate(it)
			}
		}
		d.purse.reserved[num] = est
	}
	return nil
}

// estimate is what a request for it is reserved, in nanodollars at the
// batch price: its input as the runner estimates an online call's (the
// stage's estimate scaled by what was billed against earlier estimates),
// and the output at the request's cap.
func (d *Driver) estimate(it pipeline.Item) pipeline.NanoUSD {
	var estIn, capOut int64
	if e, ok := d.stage.(pipeline.Estimator); ok {
		estIn, capOut = e.EstimateInput(it), e.MaxOutputTokens()
	} else {
		estIn = int64(utf8.RuneCountInString(it.Text)+3) / 4
	}
	p := &d.purse
	in := estIn
	if p.estIn > 0 {
		in = (estIn*p.in + p.estIn - 1) / p.estIn
	}
	if capOut <= 0 {
		capOut = fallbackOut
		if p.outMax > 0 {
			capOut = p.outMax
		}
	}
	return pipeline.NanoUSDUp(d.batchCost(pipeline.Usage{PromptTokens: in, CandidateTokens: capOut}))
}

// observe calibrates the estimate with one answered request's billed
// usage.
func (d *Driver) observe(it pipeline.Item, u pipeline.Usage) {
	if !d.purse.on() || u == (pipeline.Usage{}) {
		return
	}
	if e, ok := d.stage.(pipeline.Estimator); ok {
		d.purse.estIn += e.EstimateInput(it)
		d.purse.in += u.PromptTokens
	}
	d.purse.outMax = max(d.purse.outMax, u.CandidateTokens)
}

// fitting is how many of the next max items of the queue the next job
// may take within the budget (all of them with no budget): the longest
// run of them whose requests' estimated cost fits, items the cache
// answers, whose question another request asks or that the stage's
// condition leaves out costing nothing.
// perItem is the estimate per item of those looked at, for the stop's
// message.
func (d *Driver) fitting(max int) (n int, perItem pipeline.NanoUSD, err error) {
	if !d.purse.on() {
		return max, 0, nil
	}
	next, err := d.db.Queued(d.stage.Name(), 0, max)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errStore, err)
	}
	var est, all pipeline.NanoUSD
	var seen int64
	asked := map[string]bool{}
	for i, q := range next {
		if sk, ok := d.stage.(pipeline.Skipper); ok {
			if _, skip := sk.Skip(context.Background(), q.Item); skip {
				// Committed without a request at create, as online.
				n = i + 1
				continue
			}
		}
		c := d.estimate(q.Item)
		all += c
		seen++
		key := d.key(q.Item)
		if _, hit := d.cached(key); !hit && !(key != "" && (asked[key] || d.askedElsewhere(key, 0))) {
			asked[key] = key != ""
			if !d.purse.fits(0, est+c) {
				break
			}
			est += c
		}
		n = i + 1
	}
	if seen > 0 {
		perItem = all / pipeline.NanoUSD(seen)
	}
	return n, perItem, nil
}

// book reserves est for job t before its create, or reports that it does
// not fit.
func (d *Driver) book(t *tracked, est pipeline.NanoUSD) bool {
	if !d.purse.on() {
		return true
	}
	if !d.purse.fits(t.job.Num, est) {
		return false
	}
	d.purse.reserved[t.job.Num] = est
	return true
}

// settle replaces job num's reservation by what its answers were billed.
func (d *Driver) settle(num uint64, billed float64) {
	delete(d.purse.reserved, num)
	d.purse.spent += pipeline.NanoUSDUp(billed)
}

// release drops job num's reservation: it ended with nothing billed.
func (d *Driver) release(num uint64) { delete(d.purse.reserved, num) }

// budgetStop is the stop of a run whose next job did not fit, with the
// figures at the end of the run; nil when nothing is left queued.
func (d *Driver) budgetStop() error {
	left, err := d.queued()
	if err != nil || left == 0 {
		return err
	}
	p := &d.purse
	e := &BudgetError{CapUSD: d.cfg.Budget.RunUSD, SpentUSD: p.spent.USD(), Left: left, PerItemUSD: d.perItem.USD(), ReservedUSD: d.perItem.USD()}
	if n := d.sum.Answered + d.sum.Dead; n > 0 {
		// At this run's rate, answers from the cache included, as the
		// runner forecasts.
		e.PerItemUSD = p.spent.USD() / float64(n)
	}
	// The run's cap is named when it is the one the next item crosses.
	if d.cfg.Budget.TotalUSD > 0 && (d.cfg.Budget.RunUSD <= 0 || p.spent+d.perItem <= pipeline.NanoUSDDown(d.cfg.Budget.RunUSD)) {
		e.Total, e.CapUSD, e.BeforeUSD = true, d.cfg.Budget.TotalUSD, p.before.USD()
	}
	return e
}
