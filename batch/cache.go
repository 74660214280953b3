// This file gives batch jobs the online path's answer cache: a question
// the store has answered is committed from it without a request, a
// question asked by several items (of one job, or of jobs in flight
// together) is sent once and its answer shared, and every answer bought
// fills the cache (see apply), so a later run, batch or online, asking the
// same question pays nothing.

package batch

import (
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// key is it's answer-cache key: "" with the cache off, for a stage that
// is not a pipeline.Cacheable, or for an item that has no key (it is
// asked, and gets the online path's verdict).
func (d *Driver) key(it pipeline.Item) string {
	if d.cfg.NoCache {
		return ""
	}
	s, ok := d.stage.(pipeline.Stage)
	if !ok {
		return ""
	}
	return pipeline.CacheKeyOf(s, it)
}

// cached is the store's answer to key, as the runner reads it: an
// unreadable cache is a miss (the question is asked), never a stop.
func (d *Driver) cached(key string) (pipeline.Result, bool) {
	if key == "" {
		return pipeline.Result{}, false
	}
	res, ok, err := d.db.CachedAnswer(d.stage.Name(), key)
	if err != nil {
		d.cfg.Log.Warn("batch: answer cache unreadable: asking instead", "stage", d.stage.Name(), "err", err)
		return pipeline.Result{}, false
	}
	return res, ok
}

// reused is the transition of an item answered without a request of its
// own: from the cache, or by another item's request for the same
// question. What it saved is res's usage at the batch price, what asking
// would have cost.
func (d *Driver) reused(it pipeline.Item, key string, res pipeline.Result) pipeline.Transition {
	return pipeline.Transition{Stage: d.stage.Name(), ID: it.ID, Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: res.Output}, CacheKey: key, Cached: true, SavedUSD: d.batchCost(res.Usage)}
}

// asking records that job num's requests carry keys, so a job created
// while it is open holds its items with those keys without asking again.
func (d *Driver) asking(num uint64, keys []string) {
	for _, k := range keys {
		if _, ok := d.askedBy[k]; !ok {
			d.askedBy[k] = num
		}
	}
}

// answered forgets the keys job num asked: it is closed, and its answers
// are in the cache (or were not given).
func (d *Driver) answered(num uint64) {
	for k, n := range d.askedBy {
		if n == num {
			delete(d.askedBy, k)
		}
	}
}

// askedElsewhere reports whether another open job's requests carry key.
func (d *Driver) askedElsewhere(key string, num uint64) bool {
	n, ok := d.askedBy[key]
	return ok && n != num
}

// relearnAsked rebuilds, on resume, which keys the jobs that may exist at
// the API ask. Only savings depend on it: a key missed is asked again.
func (d *Driver) relearnAsked() error {
	for _, num := range d.order() {
		t := d.jobs[num]
		if t.job.Name == "" && t.job.CreateSent.IsZero() {
			continue
		}
		items, err := d.db.BatchItems(num)
		if err != nil {
			return err
		}
		var keys []string
		for _, it := range items {
			if k := d.key(it); k != "" {
				keys = append(keys, k)
			}
		}
		d.asking(num, keys)
	}
	return nil
}
