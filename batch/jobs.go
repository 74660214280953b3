package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// keyField is the inlined request's metadata key that carries the item id.
const keyField = "key"

// pollDue polls every created job whose time has come.
func (d *Driver) pollDue(ctx context.Context, now time.Time) error {
	for _, num := range d.order() {
		t := d.jobs[num]
		if t.job.Name == "" || now.Before(t.nextPoll) {
			continue
		}
		if err := d.poll(ctx, t, now); err != nil {
			return err
		}
	}
	return nil
}

// poll reads job t's state and acts on it.
func (d *Driver) poll(ctx context.Context, t *tracked, now time.Time) error {
	t.nextPoll = now.Add(t.interval)
	t.interval = min(2*t.interval, d.cfg.PollMax)
	job, err := d.apiFor(t).Batches.Get(ctx, t.job.Name, nil)
	var ae genai.APIError
	switch {
	case errors.As(err, &ae) && ae.Code == http.StatusNotFound:
		// Asked where it was created (apiFor): the job is gone there.
		d.sum.Failed++
		return d.close(t, "the API no longer knows the job (deleted?)", now)
	case errors.As(err, &ae) && (ae.Code == http.StatusUnauthorized || ae.Code == http.StatusForbidden):
		return fmt.Errorf("batch job %d (%s): the API refused the key: %w (check GEMINI_API_KEY)", t.job.Num, t.job.Name, err)
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.cfg.Log.Warn("batch: poll failed; trying again later", "job", t.job.Num, "name", t.job.Name, "err", err)
		return nil
	}
	// A finished inlined job's answer carries every response: read the
	// counts only while they say something the results will not.
	counts, apiErr := t.job.Counts, ""
	if job.State != genai.JobStateSucceeded {
		if c, e, err := d.apiStats(ctx, d.apiFor(t), t.job.Name); err == nil {
			counts, apiErr = c, e
		}
	}
	if string(job.State) != t.job.State || counts != t.job.Counts || apiErr != "" {
		if t.job, err = d.db.UpdateBatch(t.job.Num, string(job.State), counts, apiErr, now); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
		d.cfg.Log.Info("batch: job state", "job", t.job.Num, "name", t.job.Name, "state", job.State,
			"requests", counts.Requests, "succeeded", counts.Succeeded, "failed", counts.Failed)
		d.progress()
	}
	switch {
	case job.State == genai.JobStateSucceeded:
		return d.collect(ctx, t, job, now)
	case job.State == genai.JobStateCancelled && d.pastDeadline(t, now):
		// The cancel sent at the deadline (the job's, or auto mode's
		// run's), confirmed at a later look.
		d.sum.Deadline++
		return d.close(t, fmt.Sprintf("past the deadline (%s after create): cancelled, the API confirmed it with no results", now.Sub(t.job.Submitted).Round(time.Second)), now)
	case endedEmpty(job.State):
		d.sum.Failed++
		note := fmt.Sprintf("the job ended %s with no results", job.State)
		if t.job.APIError != "" {
			note += ": " + t.job.APIError
		}
		return d.close(t, note, now)
	}
	if !d.pastDeadline(t, now) {
		return nil
	}
	return d.cancelAtDeadline(ctx, t, job.State, now)
}

// endedEmpty reports whether a job in state s has ended without results:
// only then may its items go back to the queue without being paid twice.
func endedEmpty(s genai.JobState) bool {
	return s == genai.JobStateFailed || s == genai.JobStateCancelled || s == genai.JobStateExpired
}

// cancelAtDeadline cancels job t, still in state was past the deadline,
// and looks once more. The API cancels asynchronously and a job may finish
// in between, so the items stay with the job until a look shows it ended:
// SUCCEEDED has its results collected, FAILED, CANCELLED or EXPIRED
// returns them; anything else (still running, a look that failed) keeps
// the job polled at the first interval, since re-queueing items a job may
// still answer pays for them twice.
func (d *Driver) cancelAtDeadline(ctx context.Context, t *tracked, was genai.JobState, now time.Time) error {
	if err := d.apiFor(t).Batches.Cancel(ctx, t.job.Name, nil); err != nil {
		d.cfg.Log.Warn("batch: cancel at the deadline failed", "job", t.job.Num, "name", t.job.Name, "err", err)
	}
	again, err := d.apiFor(t).Batches.Get(ctx, t.job.Name, nil)
	if err == nil && string(again.State) != t.job.State {
		if t.job, err = d.db.UpdateBatch(t.job.Num, string(again.State), t.job.Counts, "", now); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
	}
	if err == nil && again.State == genai.JobStateSucceeded {
		return d.collect(ctx, t, again, now)
	}
	if err == nil && endedEmpty(again.State) {
		d.sum.Deadline++
		return d.close(t, fmt.Sprintf("still %s at the deadline (%s after create): cancelled", was, now.Sub(t.job.Submitted).Round(time.Second)), now)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	t.interval, t.nextPoll = d.cfg.Poll, now.Add(d.cfg.Poll)
	d.cfg.Log.Warn("batch: cancelled at the deadline, not yet confirmed by the API; its items stay with the job until it ends",
		"job", t.job.Num, "name", t.job.Name, "state", t.job.State, "look_err", err)
	return nil
}

// unreadTries is how many times auto mode reads a SUCCEEDED job's
// results past the run's deadline before it leaves the job for a later
// run.
const unreadTries = 3

// row is one request's result.
type row struct {
	resp *genai.GenerateContentResponse
	err  *genai.JobError
}

// collect reads a succeeded job's results, matches them to items by key,
// commits them and returns what is left to the queue.
func (d *Driver) collect(ctx context.Context, t *tracked, job *genai.BatchJob, now time.Time) error {
	rows, stray, err := d.results(ctx, d.apiFor(t), job)
	if err == nil {
		return d.apply(ctx, t, rows, stray, now)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The answers are paid for: the job is never closed for a broken
	// download (that would re-queue its items and pay them again). It is
	// read again at its next poll, the interval growing. Only auto mode's
	// run deadline ends the wait: the job stays open holding its items,
	// and the run stops so a later one collects them.
	t.readFails++
	d.cfg.Log.Warn("batch: reading the results of a SUCCEEDED job failed; its items stay with it, trying again later",
		"job", t.job.Num, "name", t.job.Name, "tries", t.readFails, "err", err)
	if !d.until.IsZero() && !now.Before(d.until) && t.readFails >= unreadTries {
		delete(d.jobs, t.job.Num)
		d.unread = append(d.unread, fmt.Sprintf("job %d (%s): %v", t.job.Num, t.job.Name, err))
	}
	return nil
}

// apply commits the results of job t, matched to its items by key, and
// closes it, returning what is left to the queue.
func (d *Driver) apply(ctx context.Context, t *tracked, rows map[string]row, stray int, now time.Time) error {
	items, err := d.db.BatchItems(t.job.Num)
	if err != nil {
		return err
	}
	// In ModeBatch, what this job sent for the last time allowed goes
	// to the dead letters instead of back to the queue.
	var sends map[string]int
	if d.cfg.Mode == ModeBatch {
		if sends, err = d.sendsOf(t.job.Num); err != nil {
			return err
		}
	}
	// A commit of these results landed before (its driver died before it
	// closed the job): it used every answer it could, and what the rows
	// still held were billed is in the ledger and the job's usage already.
	// They go back to the queue without being billed again. Answered,
	// Dead and Usage cannot tell: create commits what it answers without
	// a request (the cache, a condition, a refusal) before the job exists.
	a := &applied{again: t.job.ResultsCommitted, held: map[string]bool{}, got: map[string]pipeline.Result{}}
	for _, it := range items {
		a.held[it.ID] = true
		if r, ok := rows[it.ID]; ok {
			d.applyRow(ctx, a, it, r, sends[it.ID], now)
		} else {
			a.waiting = append(a.waiting, it)
		}
	}
	d.applyWaiting(ctx, a, sends, now)
	// Results for items the job no longer holds (answered online after a
	// deadline, re-queued, re-ingested) go to the store to be counted as
	// ignored, never applied.
	for key := range rows {
		if !a.held[key] {
			a.ts = append(a.ts, pipeline.Transition{Stage: d.stage.Name(), ID: key, Outcome: pipeline.Succeeded})
		}
	}
	d.sum.Ignored += stray
	if err := d.commit(t, a.ts); err != nil {
		return err
	}
	d.settle(t.job.Num, a.billed)
	return d.closeApplied(t, a, len(rows), now)
}

// applied is the books of one job's results being applied.
type applied struct {
	// again: these results were committed once before (apply).
	again bool
	ts    []pipeline.Transition
	// fatal is the first fatal error of a row.
	fatal    error
	answered int
	// held: the job's items by id.
	held map[string]bool
	// Items sent without a request of their own (their question asked
	// by another item) share its answer; the answers by key.
	waiting []pipeline.Item
	got     map[string]pipeline.Result
	billed  float64 // what the job's rows cost
}

// applyRow turns item it's result row r, its request sent n times, into
// a transition.
func (d *Driver) applyRow(ctx context.Context, a *applied, it pipeline.Item, r row, n int, now time.Time) {
	key := d.key(it)
	res, err := d.stage.DecodeBatch(it, r.resp, r.err)
	if a.again {
		res.Usage = pipeline.Usage{}
	}
	cost := d.addUsage(res.Usage)
	a.billed += cost
	d.observe(it, res.Usage)
	tr, ok := d.transition(ctx, it, res, err, now)
	if !ok && n >= d.cfg.MaxSends && pipeline.ClassOf(ctx, err) != pipeline.ClassFatal {
		tr, ok = d.sentOut(ctx, it, n, err, now), true
	}
	// The store's ledger counts what was billed (a lifetime budget
	// reads it), and keeps the answer for the same question asked
	// later.
	tr.CostUSD, tr.Usage = cost, res.Usage
	if tr.Outcome == pipeline.Succeeded {
		tr.CacheKey = key
		if key != "" {
			a.got[key] = res
		}
	}
	if err != nil && pipeline.ClassOf(ctx, err) == pipeline.ClassFatal && a.fatal == nil {
		a.fatal = err
	}
	switch {
	case ok:
		a.ts = append(a.ts, tr)
		a.answered++
	case res.Usage != (pipeline.Usage{}):
		// Billed though it goes back to the queue (an answer cut
		// off or off the schema): the ledger still counts it.
		tr.Outcome = pipeline.Billed
		a.ts = append(a.ts, tr)
	}
}

// applyWaiting gives the items held without a request the answer to
// their question, or the dead letter of an item sent its last time.
func (d *Driver) applyWaiting(ctx context.Context, a *applied, sends map[string]int, now time.Time) {
	for _, it := range a.waiting {
		key := d.key(it)
		res, ok := a.got[key]
		if !ok && key != "" {
			// Asked by another job, which may have answered by now.
			res, ok = d.cached(key)
		}
		switch n := sends[it.ID]; {
		case ok:
			a.ts = append(a.ts, d.reused(it, key, res))
		case n >= d.cfg.MaxSends:
			a.ts = append(a.ts, d.sentOut(ctx, it, n, nil, now))
		}
		// Otherwise no result for it: returned by the close.
	}
}

// closeApplied closes job t, whose results (of rows rows) were applied,
// and reports a row's fatal error.
func (d *Driver) closeApplied(t *tracked, a *applied, rows int, now time.Time) error {
	note := fmt.Sprintf("succeeded: %d of %d results used", a.answered, rows)
	if a.answered == 0 && rows > 0 {
		// Whatever the state says, nothing came of it.
		d.sum.Failed++
		note = fmt.Sprintf("the job said SUCCEEDED but every one of its %d requests failed", rows)
	} else {
		d.sum.Succeeded++
	}
	if err := d.close(t, note, now); err != nil {
		return err
	}
	if a.fatal != nil {
		return fmt.Errorf("batch job %d (%s): %w", t.job.Num, t.job.Name, a.fatal)
	}
	return nil
}

// transition turns one item's outcome into a store transition: an answer,
// or a dead letter for a permanent error. ok is false for the outcomes
// that send the item back to the queue (transient, rate-limited, fatal).
func (d *Driver) transition(ctx context.Context, it pipeline.Item, res pipeline.Result, err error, now time.Time) (pipeline.Transition, bool) {
	tr := pipeline.Transition{Stage: d.stage.Name(), ID: it.ID}
	if err == nil {
		tr.Outcome, tr.Result = pipeline.Succeeded, res
		return tr, true
	}
	if c := pipeline.ClassOf(ctx, err); c == pipeline.ClassPermanent {
		tr.Outcome = pipeline.DeadLettered
		tr.Dead = pipeline.DeadLetter{Class: c, Message: err.Error(), Cause: pipeline.CauseOf(err), Attempts: 1, First: now.UTC(), Last: now.UTC()}
		return tr, true
	}
	return tr, false
}

// commit applies ts to job t and counts what happened.
func (d *Driver) commit(t *tracked, ts []pipeline.Transition) error {
	if len(ts) == 0 {
		return nil
	}
	before := t.job
	for _, tr := range ts {
		if tr.Cached {
			d.sum.Cached++
			d.sum.CacheSavedUSD += tr.SavedUSD
		}
	}
	if _, err := d.db.CommitBatch(t.job.Num, ts); err != nil {
		return fmt.Errorf("batch job %d: commit results: %w", t.job.Num, err)
	}
	var err error
	if t.job, err = d.db.BatchJobByNum(t.job.Num); err != nil {
		return err
	}
	d.sum.Answered += t.job.Answered - before.Answered
	d.sum.Dead += t.job.Dead - before.Dead
	d.sum.Ignored += t.job.Ignored - before.Ignored
	return nil
}

// results reads a succeeded job's results by key; stray counts results
// without a usable key (they cannot be matched, so they are not used).
func (d *Driver) results(ctx context.Context, api *genai.Client, job *genai.BatchJob) (rows map[string]row, stray int, err error) {
	rows = map[string]row{}
	if job.Dest == nil {
		return nil, 0, errors.New("the job has no output")
	}
	if job.Dest.FileName == "" {
		for _, r := range job.Dest.InlinedResponses {
			key := r.Metadata[keyField]
			if _, dup := rows[key]; key == "" || dup {
				stray++
				continue
			}
			rows[key] = row{resp: r.Response, err: r.Error}
		}
		return rows, stray, nil
	}
	data, err := download(ctx, api, job.Dest.FileName)
	if err != nil {
		return nil, 0, fmt.Errorf("download %s: %w", job.Dest.FileName, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l struct {
			Key      string                         `json:"key"`
			Response *genai.GenerateContentResponse `json:"response"`
			Error    *genai.JobError                `json:"error"`
		}
		// Every line we sent carried a key, so a line without one is not
		// a result: an error body (`{"error":{...}}`) or a broken file.
		// Counted as a stray row, it would close the job with every item
		// returned, paid for twice.
		if err := json.Unmarshal(line, &l); err != nil || l.Key == "" || (l.Response == nil && l.Error == nil) {
			return nil, 0, fmt.Errorf("%s line %d is not a keyed result (%.80s)", job.Dest.FileName, n, line)
		}
		if _, dup := rows[l.Key]; dup {
			stray++
			continue
		}
		rows[l.Key] = row{resp: l.Response, err: l.Error}
	}
	return rows, stray, sc.Err()
}
