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

// create builds job t's requests and creates it at the API, then records
// its name. Items whose request cannot be built (empty text, a template
// failing on them) get the online path's verdict at once.
func (d *Driver) create(ctx context.Context, t *tracked, now time.Time) error {
	items, err := d.db.BatchItems(t.job.Num)
	if err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	sends, err := d.sendsOf(t.job.Num)
	if err != nil {
		return err
	}
	var reqs []*genai.InlinedRequest
	var lines bytes.Buffer
	// refused: items the online path would refuse or leave out (a
	// stage's condition) without a call, and items whose question the
	// cache answers; all are committed before create. keys: the
	// questions this job's requests ask.
	var refused []pipeline.Transition
	var keys []string
	var est pipeline.NanoUSD // the requests' estimated cost
	asked := map[string]bool{}
	for _, it := range items {
		if sk, ok := d.stage.(pipeline.Skipper); ok {
			if res, skip := sk.Skip(ctx, it); skip {
				refused = append(refused, pipeline.Transition{Stage: d.stage.Name(), ID: it.ID, Outcome: pipeline.Succeeded, Result: res})
				continue
			}
		}
		key := d.key(it)
		if res, ok := d.cached(key); ok {
			refused = append(refused, d.reused(it, key, res))
			continue
		}
		if key != "" && (asked[key] || d.askedElsewhere(key, t.job.Num)) {
			// Held without a request: the answer to the request that asks
			// it is shared when the results are applied.
			continue
		}
		if n := sends[it.ID]; n >= d.cfg.MaxSends {
			// Only a request is paid: a skip or an answer from the cache
			// is not refused for the bound. In ModeAuto the item stays
			// without a request, and the job gives it back to the
			// online runner; in ModeBatch it is done being sent.
			if d.cfg.Mode != ModeAuto {
				refused = append(refused, d.sentOut(ctx, it, n, nil, now))
			}
			continue
		}
		r, err := d.stage.BatchRequest(it)
		if err != nil {
			tr, ok := d.transition(ctx, it, pipeline.Result{}, err, now)
			if !ok {
				return fmt.Errorf("batch job %d: item %s: %w", t.job.Num, it.ID, err)
			}
			refused = append(refused, tr)
			continue
		}
		r.Metadata = map[string]string{keyField: it.ID}
		line, err := jsonlLine(it.ID, r)
		if err != nil {
			return fmt.Errorf("batch job %d: item %s: encode request: %w", t.job.Num, it.ID, err)
		}
		lines.Write(line)
		lines.WriteByte('\n')
		reqs = append(reqs, r)
		if d.purse.on() {
			est += d.estimate(it)
		}
		if key != "" {
			asked[key] = true
			keys = append(keys, key)
		}
	}
	if len(refused) > 0 {
		if err := d.commit(t, refused); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
	}
	if len(reqs) == 0 {
		if err := d.close(t, "nothing to send: every item was answered from the cache, left out by the stage's condition, refused before a call, asked by another job or sent max_sends times already (auto mode: left to the online calls)", now); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
		return nil
	}
	if !d.book(t, est) {
		// Paid whole once created: a job that may cross the budget is
		// not made (a resumed intent under a lower cap, or a cost that
		// grew since its items were reserved).
		d.blocked, d.perItem = true, est/pipeline.NanoUSD(len(reqs))
		if err := d.close(t, fmt.Sprintf("not created: its estimated cost $%.4f does not fit the budget", est.USD()), now); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
		return nil
	}
	src := &genai.BatchJobSource{InlinedRequests: reqs}
	if lines.Len() > d.cfg.InlineBytes {
		f, err := d.apiFor(t).Files.Upload(ctx, bytes.NewReader(lines.Bytes()), &genai.UploadFileConfig{
			DisplayName: t.job.DisplayName + "-input", MIMEType: "application/jsonl",
		})
		if err != nil {
			// An orphan upload costs nothing and expires in 48 h; the job
			// itself was not created.
			return fmt.Errorf("batch job %d: upload its %d requests (%d bytes): %w", t.job.Num, len(reqs), lines.Len(), err)
		}
		src = &genai.BatchJobSource{FileName: f.Name}
	}
	// From here the job may exist whatever the answer says: a crash or a
	// lost answer makes the next look wait until it would have shown.
	d.asking(t.job.Num, keys)
	rec, err := d.db.MarkBatchCreate(t.job.Num, est.USD(), d.cfg.Now())
	if err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	t.job = rec
	job, err := d.apiFor(t).Batches.Create(ctx, d.stage.Model(), src, &genai.CreateBatchJobConfig{DisplayName: t.job.DisplayName})
	if err != nil {
		var ae genai.APIError
		if errors.As(err, &ae) && ae.Code == http.StatusTooManyRequests {
			return ae
		}
		return fmt.Errorf("batch job %d: create at the API: %w", t.job.Num, err)
	}
	rec, err = d.db.SetBatchName(t.job.Num, job.Name, string(job.State), d.cfg.Now())
	if err != nil {
		return fmt.Errorf("%w: batch job %d created as %s but not recorded: %w (the next run re-attaches it by its display name %s)", errStore, t.job.Num, job.Name, err, t.job.DisplayName)
	}
	t.job = rec
	t.interval = d.cfg.Poll
	t.nextPoll = now.Add(t.interval)
	d.sum.Created++
	d.cfg.Log.Info("batch: job created", "job", t.job.Num, "name", job.Name, "requests", len(reqs), "file", src.FileName != "")
	d.progress()
	return nil
}

// jsonlLine is one line of a job's input file: the item's key and the
// request in the REST form the SDK would send it inlined (system
// instruction beside contents, the rest in generationConfig).
func jsonlLine(key string, r *genai.InlinedRequest) ([]byte, error) {
	gc := *r.Config
	if gc.SafetySettings != nil || gc.Tools != nil || gc.ToolConfig != nil || gc.Labels != nil || gc.CachedContent != "" {
		return nil, errors.New("the request uses settings that a batch file line does not carry here (safety settings, tools, labels, cached content)")
	}
	system := gc.SystemInstruction
	gc.SystemInstruction, gc.HTTPOptions, gc.AutomaticContinuation = nil, nil, nil
	return json.Marshal(struct {
		Key     string `json:"key"`
		Request struct {
			Contents          []*genai.Content             `json:"contents"`
			SystemInstruction *genai.Content               `json:"systemInstruction,omitempty"`
			GenerationConfig  *genai.GenerateContentConfig `json:"generationConfig"`
		} `json:"request"`
	}{Key: key, Request: struct {
		Contents          []*genai.Content             `json:"contents"`
		SystemInstruction *genai.Content               `json:"systemInstruction,omitempty"`
		GenerationConfig  *genai.GenerateContentConfig `json:"generationConfig"`
	}{r.Contents, system, &gc}})
}

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
	var ts []pipeline.Transition
	var fatal error
	answered := 0
	held := map[string]bool{}
	// Items sent without a request of their own (their question asked
	// by another item) share its answer; the answers by key.
	var waiting []pipeline.Item
	got := map[string]pipeline.Result{}
	var billed float64 // what the job's rows cost
	// A commit of these results landed before (its driver died before it
	// closed the job): it used every answer it could, and what the rows
	// still held were billed is in the ledger and the job's usage already.
	// They go back to the queue without being billed again. Answered,
	// Dead and Usage cannot tell: create commits what it answers without
	// a request (the cache, a condition, a refusal) before the job exists.
	again := t.job.ResultsCommitted
	for _, it := range items {
		held[it.ID] = true
		key := d.key(it)
		r, ok := rows[it.ID]
		if !ok {
			waiting = append(waiting, it)
			continue
		}
		res, err := d.stage.DecodeBatch(it, r.resp, r.err)
		if again {
			res.Usage = pipeline.Usage{}
		}
		cost := d.addUsage(res.Usage)
		billed += cost
		d.observe(it, res.Usage)
		tr, ok := d.transition(ctx, it, res, err, now)
		if n := sends[it.ID]; !ok && n >= d.cfg.MaxSends && pipeline.ClassOf(ctx, err) != pipeline.ClassFatal {
			tr, ok = d.sentOut(ctx, it, n, err, now), true
		}
		// The store's ledger counts what was billed (a lifetime budget
		// reads it), and keeps the answer for the same question asked
		// later.
		tr.CostUSD, tr.Usage = cost, res.Usage
		if tr.Outcome == pipeline.Succeeded {
			tr.CacheKey = key
			if key != "" {
				got[key] = res
			}
		}
		if err != nil && pipeline.ClassOf(ctx, err) == pipeline.ClassFatal && fatal == nil {
			fatal = err
		}
		switch {
		case ok:
			ts = append(ts, tr)
			answered++
		case res.Usage != (pipeline.Usage{}):
			// Billed though it goes back to the queue (an answer cut
			// off or off the schema): the ledger still counts it.
			tr.Outcome = pipeline.Billed
			ts = append(ts, tr)
		}
	}
	for _, it := range waiting {
		key := d.key(it)
		res, ok := got[key]
		if !ok && key != "" {
			// Asked by another job, which may have answered by now.
			res, ok = d.cached(key)
		}
		switch n := sends[it.ID]; {
		case ok:
			ts = append(ts, d.reused(it, key, res))
		case n >= d.cfg.MaxSends:
			ts = append(ts, d.sentOut(ctx, it, n, nil, now))
		}
		// Otherwise no result for it: returned below.
	}
	// Results for items the job no longer holds (answered online after a
	// deadline, re-queued, re-ingested) go to the store to be counted as
	// ignored, never applied.
	for key := range rows {
		if !held[key] {
			ts = append(ts, pipeline.Transition{Stage: d.stage.Name(), ID: key, Outcome: pipeline.Succeeded})
		}
	}
	d.sum.Ignored += stray
	if err := d.commit(t, ts); err != nil {
		return err
	}
	d.settle(t.job.Num, billed)
	note := fmt.Sprintf("succeeded: %d of %d results used", answered, len(rows))
	if answered == 0 && len(rows) > 0 {
		// Whatever the state says, nothing came of it.
		d.sum.Failed++
		note = fmt.Sprintf("the job said SUCCEEDED but every one of its %d requests failed", len(rows))
	} else {
		d.sum.Succeeded++
	}
	if err := d.close(t, note, now); err != nil {
		return err
	}
	if fatal != nil {
		return fmt.Errorf("batch job %d (%s): %w", t.job.Num, t.job.Name, fatal)
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
		tr.Dead = pipeline.DeadLetter{Class: c, Message: err.Error(), Attempts: 1, First: now.UTC(), Last: now.UTC()}
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
