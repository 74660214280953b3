package pipeline

import (
	"context"
	"sync"
	"time"
)

// Cacheable is an optional Stage interface: a stage whose answer is fully
// determined by its request (a model at temperature 0, asked the same
// rendered prompt, schema and generation settings) names that request by
// a key, and the runner pays for each key once.
//
// CacheKey must cover everything that determines the answer (model,
// system instruction, contents, schema, generation config, the stage's
// configuration fingerprint), so that a changed prompt or model is a
// different key, and nothing that does not (the API key, timeouts), so
// that identical questions share one. An error means "do not cache this
// item": the runner calls Process, which reports the problem. It must be
// safe for concurrent use and make no call.
type Cacheable interface {
	CacheKey(it Item) (string, error)
}

// AnswerCache is an optional Store interface: answers kept by (stage,
// key), written by Commit in the transaction of the Succeeded transition
// that carried the key (Transition.CacheKey), so a cached answer is never
// ahead of the result it came from.
type AnswerCache interface {
	// CachedAnswer returns the answer stored under (stage, key): its
	// output and the usage it was billed when it was bought. ok is false
	// when there is none.
	CachedAnswer(stage, key string) (res Result, ok bool, err error)
}

// AnswerFlights is an optional interface of a fleet's Store (one that
// implements Claimer and AnswerCache): it makes the singleflight per key
// hold across the workers, so that two workers meeting one new question
// at once pay for it once. A worker buys a key only while it holds the
// key's flight; the others wait for the answer to be committed, or for
// the flight to end without one (then one of them takes it).
type AnswerFlights interface {
	// TakeFlight makes this worker the fleet's buyer of (stage, key)
	// until lease from now, unless another worker holds a flight for it
	// that has not ended: taken is false then.
	TakeFlight(ctx context.Context, stage, key string, lease time.Duration) (taken bool, err error)
	// LandFlight ends this worker's flight of (stage, key) when it has
	// no answer to commit. The commit of a Succeeded transition carrying
	// the key (not Cached) ends it, in its transaction, whether the
	// transition is applied or fenced off: a worker that takes the flight
	// next finds the answer, or buys it.
	LandFlight(ctx context.Context, stage, key string) error
}

// FleetFlightPoll is how often a worker waiting for another worker's
// answer looks for it.
const FleetFlightPoll = 250 * time.Millisecond

// flight is one key's answer being bought by its owner. Items with the
// same key wait for it instead of calling (singleflight per key).
type flight struct {
	// done is closed when the owner finished, with or without an answer.
	done chan struct{}
	// fleet is set when the owner holds the key's fleet flight too
	// (AnswerFlights): it must land it when done.
	fleet bool
	// res and answered are set before done is closed: the owner's
	// successful result (its Usage is what it was billed).
	res      Result
	answered bool
}

// flights is one stage's keys in flight, and answers sent to the
// committer but not yet committed (a later item must find them here,
// since the store does not have them yet).
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// join returns the key's flight and whether the caller owns it (it did
// not exist: the caller must finish it with land).
func (fs *flights) join(key string) (f *flight, owner bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[key]; f != nil {
		return f, false
	}
	if fs.m == nil {
		fs.m = map[string]*flight{}
	}
	f = &flight{done: make(chan struct{})}
	fs.m[key] = f
	return f, true
}

// land finishes the owner's flight. An answered flight stays in the map
// until its transition is committed (forget), so items arriving meanwhile
// reuse it; a failed one leaves at once, and its waiters try on their own.
func (fs *flights) land(key string, f *flight, res Result, answered bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.res, f.answered = res, answered
	close(f.done)
	if !answered && fs.m[key] == f {
		delete(fs.m, key)
	}
}

// forget drops an answered flight once the store holds its answer.
func (fs *flights) forget(key string, f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m[key] == f {
		delete(fs.m, key)
	}
}

// cacheKey is the item's key at stage i, "" when the stage is not cached
// (the cache is off, the stage is not Cacheable, or the key cannot be
// made for this item).
func (r *Runner) cacheKey(i int, it Item) string {
	if r.NoCache {
		return ""
	}
	return CacheKeyOf(r.Stages[i].Stage, it)
}

// CacheKeyOf is s's cache key for it: "" when s is not Cacheable or has
// no key for this item (it is then asked, not looked up). The runner and
// the batch driver keep answers under it.
func CacheKeyOf(s Stage, it Item) string {
	c, ok := s.(Cacheable)
	if !ok {
		return ""
	}
	key, err := c.CacheKey(it)
	if err != nil {
		return ""
	}
	return key
}

// reuse looks for key's answer: in flight (waiting for its owner), sent
// but not yet committed, or in the store. It returns the answer (hit),
// or the flight the caller now owns and must land (own), or neither when
// the item must be given back (the stage is stopping). A failed owner's
// waiters loop: one of them owns the next flight.
func (r *Runner) reuse(ctx context.Context, i int, key string) (res Result, hit bool, own *flight) {
	fs := &r.counters[i].flights
	for {
		f, owner := fs.join(key)
		if owner {
			if ac, ok := r.Store.(AnswerCache); ok {
				cached, found, err := ac.CachedAnswer(r.Stages[i].Stage.Name(), key)
				if err != nil {
					r.log().Warn("answer cache unreadable: calling instead", "stage", r.Stages[i].Stage.Name(), "err", err)
				}
				if found {
					// The store has it: nothing for others to wait for.
					fs.land(key, f, cached, false)
					return cached, true, nil
				}
				if fl, ok := r.Store.(AnswerFlights); ok {
					cached, found, taken := r.takeFleetFlight(ctx, fl, ac, i, key)
					if found || !taken {
						fs.land(key, f, cached, false)
						return cached, found, nil
					}
					f.fleet = true
				}
			}
			return Result{}, false, f
		}
		// Waiting for another item's call holds this item outside the
		// limiter, as a backoff does: away, so the pool grows past it.
		away := &r.counters[i].away
		away.Add(1)
		select {
		case <-f.done:
			away.Add(-1)
			if f.answered {
				return f.res, true, nil
			}
		case <-ctx.Done():
			away.Add(-1)
			return Result{}, false, nil
		}
	}
}

// takeFleetFlight makes this worker the fleet's buyer of key at stage i,
// or waits while another worker buys it: found when its answer is in the
// store, taken when this worker must buy it, neither when the stage is
// stopping. When the flights cannot be read, the worker buys it, as
// without them.
func (r *Runner) takeFleetFlight(ctx context.Context, fl AnswerFlights, ac AnswerCache, i int, key string) (res Result, found, taken bool) {
	name := r.Stages[i].Stage.Name()
	for {
		// Not canceled when the stage stops: a take canceled halfway
		// may still land in the database after this worker gave up
		// the flight, and strand it there until its lease ends.
		takeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Lease)
		ok, err := fl.TakeFlight(takeCtx, name, key, r.Lease)
		cancel()
		if err != nil {
			r.log().Warn("the fleet's answer flights are unreadable: buying the answer here", "stage", name, "err", err)
			return Result{}, false, true
		}
		// Look after taking: a flight ends only after its answer is
		// committed, so an answer committed meanwhile is found now.
		cached, found, err := ac.CachedAnswer(name, key)
		if err != nil {
			r.log().Warn("answer cache unreadable: calling instead", "stage", name, "err", err)
		}
		if found {
			if ok {
				r.landFleetFlight(i, key)
			}
			return cached, true, false
		}
		if ok {
			return Result{}, false, true
		}
		// Another worker is buying it: away meanwhile, as in reuse.
		r.counters[i].away.Add(1)
		slept := sleep(ctx, r.clock(), FleetFlightPoll)
		r.counters[i].away.Add(-1)
		if !slept {
			return Result{}, false, false
		}
	}
}

// renewFleetFlight extends this worker's fleet flight of key at stage i
// to a lease from now (taking a flight it holds renews it). If another
// worker took it meanwhile, this one buys the answer anyway: both
// results stand, the first committed answer is kept.
func (r *Runner) renewFleetFlight(i int, key string) {
	fl, ok := r.Store.(AnswerFlights)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.Lease)
	defer cancel()
	if _, err := fl.TakeFlight(ctx, r.Stages[i].Stage.Name(), key, r.Lease); err != nil {
		r.log().Warn("could not renew an answer flight: another worker may buy the same answer", "stage", r.Stages[i].Stage.Name(), "err", err)
	}
}

// landFleetFlight ends this worker's fleet flight of key at stage i. A
// flight that cannot be ended here ends at its lease.
func (r *Runner) landFleetFlight(i int, key string) {
	fl, ok := r.Store.(AnswerFlights)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.Lease)
	defer cancel()
	if err := fl.LandFlight(ctx, r.Stages[i].Stage.Name(), key); err != nil {
		r.log().Warn("could not end an answer flight: other workers wait for its lease to end", "stage", r.Stages[i].Stage.Name(), "err", err)
	}
}
