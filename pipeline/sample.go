package pipeline

import (
	"sync/atomic"
	"time"
)

// classIndex places a class in stageCounters.outcomes, in Classes order.
func classIndex(c Class) int {
	if c == "" {
		c = ClassOK
	}
	for i, k := range Classes {
		if k == c {
			return i
		}
	}
	return classIndex(ClassTransient) // an unknown class is treated as transient
}

func (r *Runner) progress(start time.Time) Progress {
	p := Progress{Elapsed: r.clock().Now().Sub(start)}
	for i, sc := range r.Stages {
		c := r.counters[i]
		sp := StageProgress{
			Name: sc.Stage.Name(), Done: c.done.Load(), Dead: c.dead.Load(),
			Calls: c.calls.Load(), RateLimited: c.rateLimited.Load(), Transient: c.transient.Load(), Unavailable: c.unavailable.Load(), BadAnswers: c.badAnswers.Load(),
			Usage: c.usage(), Paid: c.paid.Load(), CostUSD: toUSD(c.spent.Load()), Cached: c.cached.Load(), SavedUSD: toUSD(c.saved.Load()),
			InFlight: int(c.inFlight.Load()),
			Outcomes: make(map[Class]int64, len(Classes)),
		}
		for j, k := range Classes {
			sp.Outcomes[k] = c.outcomes[j].Load()
		}
		sp.Tiers, _ = c.tiers.stats()
		if sc.Limiter != nil {
			sp.Limit = sc.Limiter.Limit()
		}
		p.Stages = append(p.Stages, sp)
	}
	return p
}

// sampler records one Sample per stage per SampleEvery on the runner's
// clock, feeds OnTick, and takes a last sample when stop closes.
func (r *Runner) sampler(start time.Time, stop <-chan struct{}) {
	every := r.SampleEvery
	if every <= 0 {
		every = time.Second
	}
	clock := r.clock()
	rl, _ := r.Store.(RunLog)
	prev := r.progress(start)
	var buf []Sample
	flush := func() {
		if rl != nil && r.RunID != "" && len(buf) > 0 {
			if err := rl.AppendSamples(r.RunID, buf); err != nil {
				r.log().Warn("could not record samples", "err", err)
			}
		}
		buf = buf[:0]
	}
	tick := func() {
		p := r.progress(start)
		at := clock.Now()
		for i, s := range p.Stages {
			if r.Stages[i].Limiter != nil {
				r.observeLimit(i, s.Limit)
			}
			was := prev.Stages[i]
			buf = append(buf, Sample{
				At: at, Stage: s.Name, Limit: s.Limit, InFlight: s.InFlight,
				Successes: s.Done - was.Done, RateLimited: s.RateLimited - was.RateLimited,
				Transient: s.Transient - was.Transient, Unavailable: s.Unavailable - was.Unavailable,
				Tokens: s.Usage.TotalTokens - was.Usage.TotalTokens,
			})
		}
		prev = p
		if r.OnTick != nil {
			r.OnTick(p)
		}
		if len(buf) >= 10*len(p.Stages) {
			flush()
		}
	}
	// A fresh timer per period, counted from the last tick, is all a
	// Clock has to offer; the drift (one tick's work) does not matter to
	// a plot.
	for {
		t := clock.NewTimer(every)
		select {
		case <-t.C():
			tick()
		case <-stop:
			t.Stop()
			tick()
			flush()
			return
		}
	}
}

// observeLimit folds stage i's limit into its range; concurrent callers
// never lose a bound.
func (r *Runner) observeLimit(i, limit int) {
	c := r.counters[i]
	for {
		m := c.limitMin.Load()
		if (m >= 0 && int64(limit) >= m) || c.limitMin.CompareAndSwap(m, int64(limit)) {
			break
		}
	}
	raiseTo(&c.limitMax, int64(limit))
}

// raiseTo stores v in a when it is higher than a's value.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
