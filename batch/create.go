package batch

import (
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

// create builds job t's requests and creates it at the API, then records
// its name. Items whose request cannot be built (empty text, a template
// failing on them) get the online path's verdict at once.
func (d *Driver) create(ctx context.Context, t *tracked, now time.Time) error {
	o, err := d.outboxOf(ctx, t, now)
	if err != nil {
		return err
	}
	if len(o.refused) > 0 {
		if err := d.commit(t, o.refused); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
	}
	if len(o.reqs) == 0 {
		return d.closeUnsent(t, "nothing to send: every item was answered from the cache, left out by the stage's condition, refused before a call, asked by another job or sent max_sends times already (auto mode: left to the online calls)", now)
	}
	if !d.book(t, o.est) {
		// Paid whole once created: a job that may cross the budget is
		// not made (a resumed intent under a lower cap, or a cost that
		// grew since its items were reserved).
		d.blocked, d.perItem = true, o.est/pipeline.NanoUSD(len(o.reqs))
		return d.closeUnsent(t, fmt.Sprintf("not created: its estimated cost $%.4f does not fit the budget", o.est.USD()), now)
	}
	src, err := d.source(ctx, t, o)
	if err != nil {
		return err
	}
	return d.submit(ctx, t, o, src, now)
}

// outbox is what create sends for a job: its requests, inlined and as
// the lines of an input file, and what it settles without a request.
type outbox struct {
	reqs  []*genai.InlinedRequest
	lines bytes.Buffer
	// refused: items the online path would refuse or leave out (a
	// stage's condition) without a call, and items whose question the
	// cache answers; all are committed before create. keys: the
	// questions this job's requests ask.
	refused []pipeline.Transition
	keys    []string
	asked   map[string]bool
	// est is the requests' estimated cost.
	est pipeline.NanoUSD
}

// outboxOf sorts job t's items into requests and what is settled without
// one.
func (d *Driver) outboxOf(ctx context.Context, t *tracked, now time.Time) (*outbox, error) {
	items, err := d.db.BatchItems(t.job.Num)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStore, err)
	}
	sends, err := d.sendsOf(t.job.Num)
	if err != nil {
		return nil, err
	}
	o := &outbox{asked: map[string]bool{}}
	for _, it := range items {
		if err := d.sortItem(ctx, t, o, it, sends[it.ID], now); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// sortItem puts it, sent n times before, in o: settled at once, held for
// another request's answer, or a request of its own.
func (d *Driver) sortItem(ctx context.Context, t *tracked, o *outbox, it pipeline.Item, n int, now time.Time) error {
	if sk, ok := d.stage.(pipeline.Skipper); ok {
		if res, skip := sk.Skip(ctx, it); skip {
			o.refused = append(o.refused, pipeline.Transition{Stage: d.stage.Name(), ID: it.ID, Outcome: pipeline.Succeeded, Result: res})
			return nil
		}
	}
	key := d.key(it)
	if res, ok := d.cached(key); ok {
		o.refused = append(o.refused, d.reused(it, key, res))
		return nil
	}
	if key != "" && (o.asked[key] || d.askedElsewhere(key, t.job.Num)) {
		// Held without a request: the answer to the request that asks
		// it is shared when the results are applied.
		return nil
	}
	if n >= d.cfg.MaxSends {
		// Only a request is paid: a skip or an answer from the cache
		// is not refused for the bound. In ModeAuto the item stays
		// without a request, and the job gives it back to the
		// online runner; in ModeBatch it is done being sent.
		if d.cfg.Mode != ModeAuto {
			o.refused = append(o.refused, d.sentOut(ctx, it, n, nil, now))
		}
		return nil
	}
	r, err := d.stage.BatchRequest(it)
	if err != nil {
		tr, ok := d.transition(ctx, it, pipeline.Result{}, err, now)
		if !ok {
			return fmt.Errorf("batch job %d: item %s: %w", t.job.Num, it.ID, err)
		}
		o.refused = append(o.refused, tr)
		return nil
	}
	r.Metadata = map[string]string{keyField: it.ID}
	line, err := jsonlLine(it.ID, r)
	if err != nil {
		return fmt.Errorf("batch job %d: item %s: encode request: %w", t.job.Num, it.ID, err)
	}
	o.lines.Write(line)
	o.lines.WriteByte('\n')
	o.reqs = append(o.reqs, r)
	if d.purse.on() {
		o.est += d.estimate(it)
	}
	if key != "" {
		o.asked[key] = true
		o.keys = append(o.keys, key)
	}
	return nil
}

// closeUnsent closes job t, never created, with note.
func (d *Driver) closeUnsent(t *tracked, note string, now time.Time) error {
	if err := d.close(t, note, now); err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	return nil
}

// source is where job t's requests go: inlined, or an uploaded input file
// when they are too large to inline.
func (d *Driver) source(ctx context.Context, t *tracked, o *outbox) (*genai.BatchJobSource, error) {
	if o.lines.Len() <= d.cfg.InlineBytes {
		return &genai.BatchJobSource{InlinedRequests: o.reqs}, nil
	}
	f, err := d.apiFor(t).Files.Upload(ctx, bytes.NewReader(o.lines.Bytes()), &genai.UploadFileConfig{
		DisplayName: t.job.DisplayName + "-input", MIMEType: "application/jsonl",
	})
	if err != nil {
		// An orphan upload costs nothing and expires in 48 h; the job
		// itself was not created.
		return nil, fmt.Errorf("batch job %d: upload its %d requests (%d bytes): %w", t.job.Num, len(o.reqs), o.lines.Len(), err)
	}
	return &genai.BatchJobSource{FileName: f.Name}, nil
}

// submit records that job t may exist, creates it at the API and records
// its name.
func (d *Driver) submit(ctx context.Context, t *tracked, o *outbox, src *genai.BatchJobSource, now time.Time) error {
	// From here the job may exist whatever the answer says: a crash or a
	// lost answer makes the next look wait until it would have shown.
	d.asking(t.job.Num, o.keys)
	rec, err := d.db.MarkBatchCreate(t.job.Num, o.est.USD(), d.cfg.Now())
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
	if two := (*pipeline.TwoBatchJobsError)(nil); errors.As(err, &two) {
		d.cancelUnrecorded(ctx, t, job.Name)
		return fmt.Errorf("%w: %w", errStore, err)
	}
	if err != nil {
		return fmt.Errorf("%w: batch job %d created as %s but not recorded: %w (the next run re-attaches it by its display name %s)", errStore, t.job.Num, job.Name, err, t.job.DisplayName)
	}
	t.job = rec
	t.interval = d.cfg.Poll
	t.nextPoll = now.Add(t.interval)
	d.sum.Created++
	d.cfg.Log.Info("batch: job created", "job", t.job.Num, "name", job.Name, "requests", len(o.reqs), "file", src.FileName != "")
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

// cancelUnrecorded cancels API job name, created or found for t's intent
// after another job was recorded for it (the store refused name with a
// TwoBatchJobsError): only the recorded job's answers are ever collected,
// so the other one would be paid for and thrown away.
func (d *Driver) cancelUnrecorded(ctx context.Context, t *tracked, name string) {
	if err := d.apiFor(t).Batches.Cancel(ctx, name, nil); err != nil {
		d.cfg.Log.Warn("batch: a second API job for one batch job is not recorded and its cancel failed: cancel it at the API", "job", t.job.Num, "name", name, "err", err)
		return
	}
	d.cfg.Log.Warn("batch: a second API job for one batch job was cancelled at the API", "job", t.job.Num, "name", name)
}
