package pipeline

import (
	"context"
	"sync"
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

// flight is one key's answer being bought by its owner. Items with the
// same key wait for it instead of calling (singleflight per key).
type flight struct {
	// done is closed when the owner finished, with or without an answer.
	done chan struct{}
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
	c, ok := r.Stages[i].Stage.(Cacheable)
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
			}
			return Result{}, false, f
		}
		select {
		case <-f.done:
			if f.answered {
				return f.res, true, nil
			}
		case <-ctx.Done():
			return Result{}, false, nil
		}
	}
}
