package batch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// Summary is what one Run did.
type Summary struct {
	// Created counts jobs created; Reattached intents found at the API by
	// display name after a crash instead of created again.
	Created    int `json:"created"`
	Reattached int `json:"reattached"`
	// Succeeded counts jobs whose results were committed; Failed the
	// FAILED, CANCELLED, EXPIRED and every-request-failed ones; Deadline
	// those cancelled at Config.Deadline; RateLimited the 429s on create.
	Succeeded   int `json:"succeeded"`
	Failed      int `json:"failed"`
	Deadline    int `json:"deadline"`
	RateLimited int `json:"rate_limited"`
	// Answered and Dead count items committed as outputs and dead
	// letters; Returned items put back in the queue; Ignored results for
	// items no longer in their job.
	Answered int `json:"answered"`
	// Cached counts the answered items that needed no request of their
	// own: their question was in the answer cache, or asked by another
	// item.
	Cached   int `json:"cached"`
	Dead     int `json:"dead"`
	Returned int `json:"returned"`
	Ignored  int `json:"ignored"`
	// Usage is every batch answer's billed tokens; CostUSD their price at
	// the batch rate, OnlineCostUSD the same tokens at the online rate.
	Usage         pipeline.Usage `json:"usage"`
	CostUSD       float64        `json:"cost_usd"`
	OnlineCostUSD float64        `json:"online_cost_usd"`
	// CacheSavedUSD is what the Cached answers would have cost at the
	// batch rate.
	CacheSavedUSD float64 `json:"cache_saved_usd"`
}

// errStore marks a store failure: the run stops (nothing is lost; the
// next run resumes from the records).
var errStore = errors.New("batch: store")

// Driver runs one stage's items through batch jobs. Construct with New.
type Driver struct {
	cfg   Config
	db    Store
	stage Stage
	api   *genai.Client
	sum   Summary
	// jobs are the open jobs of this stage, by number.
	jobs map[uint64]*tracked
	// createAt and createWait pace creates after a 429.
	createAt   time.Time
	createWait time.Duration
	// askedBy is the open job whose requests ask each cache key (see
	// asking).
	askedBy map[string]uint64
	// purse holds the spend against Config.Budget; blocked is set while
	// the next job does not fit, perItem the estimate per item then.
	purse   purse
	blocked bool
	perItem pipeline.NanoUSD
	// lastJob is set once a job was cut short by the budget.
	lastJob bool
	// until is ModeAuto's deadline for the run (see Config.Deadline);
	// zero in ModeBatch, where each job has its own.
	until time.Time
	// clients are the clients for endpoints other than the run's that
	// open jobs were created at, by endpointKey (see dial).
	clients map[string]*genai.Client
	// holdAt is when the leases on the jobs are renewed next, and others
	// how many open jobs of the stage other workers held then (a Leaser
	// store only: see hold).
	holdAt time.Time
	others int
	// unread are the SUCCEEDED jobs whose results could not be read by
	// ModeAuto's deadline: left open, holding their items, the run stops.
	unread []string
}

// tracked is an open job and its polling pace.
type tracked struct {
	job      pipeline.BatchJob
	nextPoll time.Time
	interval time.Duration
	// readFails counts failed reads of a SUCCEEDED job's results.
	readFails int
	// unsure is set when a create failed in a way that does not prove
	// the API made no job (a 5xx, a timeout, a dropped connection), and
	// for an intent without a name found on resume: the display name is
	// looked up, at nextLook, before the next create.
	unsure   bool
	nextLook time.Time
}

// New returns a Driver of stage's items in db, calling the API with api
// (a Gemini API backend client; its retries should be off).
func New(db Store, stage Stage, api *genai.Client, cfg Config) *Driver {
	cfg.setDefaults()
	return &Driver{cfg: cfg, db: db, stage: stage, api: api, jobs: map[uint64]*tracked{}, clients: map[string]*genai.Client{}, askedBy: map[string]uint64{}}
}

// Run drives jobs until every job it knows of is closed and, in ModeBatch,
// no round is left. Items it did not get answered stay queued. It returns
// what it did; an error means the run must stop (the store failed, the
// API refused the key or the model, ctx ended): everything done so far is
// committed and a later Run resumes from the records.
func (d *Driver) Run(ctx context.Context) (Summary, error) {
	if d.cfg.Mode == ModeOnline {
		return d.sum, nil
	}
	if err := d.start(ctx); err != nil {
		return d.sum, err
	}
	rounds := 1
	if d.cfg.Mode == ModeBatch {
		rounds = d.cfg.MaxRounds
	}
	for round := 1; round <= rounds; round++ {
		returned := d.sum.Returned
		busy, err := d.round(ctx)
		if err != nil {
			return d.sum, err
		}
		if d.blocked {
			break
		}
		if again, err := d.anotherRound(returned, busy); err != nil {
			return d.sum, err
		} else if !again {
			break
		}
	}
	if len(d.unread) > 0 {
		return d.sum, fmt.Errorf("the results of %s that SUCCEEDED at the API could not be read by the run's deadline (%s): their answers are paid for, so their items stay with them and are not sent online; run the same command again to collect them: %w",
			plural(len(d.unread), "batch job"), strings.Join(d.unread, "; "), pipeline.ErrStopped)
	}
	if d.blocked {
		return d.sum, d.budgetStop()
	}
	return d.sum, nil
}

// start resumes the recorded jobs, readies the purse and, in ModeAuto,
// sets the run's deadline.
func (d *Driver) start(ctx context.Context) error {
	if err := d.resume(ctx); err != nil {
		return err
	}
	if err := d.startPurse(); err != nil {
		return err
	}
	if d.cfg.Mode == ModeAuto {
		// One deadline for the run, never renewed per job: jobs that
		// came back (a 429 kept them from being created, they expired)
		// would otherwise go into new jobs with deadlines of their own,
		// and the online runner would wait for all of them.
		from := d.cfg.Now()
		for _, t := range d.jobs {
			if t.job.Created.Before(from) {
				from = t.job.Created
			}
		}
		d.until = from.Add(d.cfg.Deadline)
	}
	return nil
}

// round sends each queued item once and drives the jobs until every one
// is closed. busy reports that the round had a job, this worker's or
// another's, that could give items back.
//
// What a round's jobs give back goes to the end of the queue and waits
// for the next round (or the online runner). Sent again at once, into
// new jobs with fresh deadlines, items of jobs that never finish in time
// would go round forever.
func (d *Driver) round(ctx context.Context) (busy bool, err error) {
	left, err := d.queued()
	if err != nil {
		return false, err
	}
	filling := true
	// Jobs other workers drive are waited for: they may die, and then
	// their jobs are this worker's to finish.
	for filling || len(d.jobs) > 0 || d.others > 0 {
		busy = busy || len(d.jobs) > 0 || d.others > 0
		now := d.cfg.Now()
		if err := d.hold(ctx, now, false); err != nil {
			return busy, err
		}
		created, err := d.createPending(ctx, now)
		if heldElsewhere(err) {
			d.holdAt = time.Time{} // lost a job: hold again, leave it
			continue
		}
		if err != nil {
			return busy, err
		}
		if created && filling && !d.until.IsZero() && !now.Before(d.until) {
			filling = false // what is left goes online
		}
		if created && filling {
			more, err := d.reserve(now, &left)
			if err != nil {
				return busy, err
			}
			if more {
				continue
			}
			// Over budget, jobs in flight may still leave room when
			// they settle below their reservations: try again then.
			filling = d.blocked && len(d.jobs) > 0
		}
		if err := d.pollDue(ctx, now); heldElsewhere(err) {
			d.holdAt = time.Time{}
			continue
		} else if err != nil {
			return busy, err
		}
		d.pollByDeadline(now)
		if wait, ok := d.nextWake(now); ok {
			if err := d.cfg.Sleep(ctx, wait); err != nil {
				return busy, err
			}
		}
	}
	return busy, nil
}

// anotherRound reports whether the round that ended gave items back to
// the queue, to be sent in the next round's jobs. In a store shared with
// other workers, their jobs give items back too (a job of theirs failed
// or expired while this driver waited for it) and their drivers may have
// ended meanwhile: what the stage's queue holds after the round is the
// next round's, whoever's job gave it back. A round that had no job at
// all (what is queued could not be reserved: other workers hold it
// online) ends the rounds: another would find the same.
func (d *Driver) anotherRound(returned int, busy bool) (bool, error) {
	if d.sum.Returned != returned {
		return true, nil
	}
	if _, shared := d.db.(Leaser); !shared || !busy {
		return false, nil
	}
	n, err := d.queued()
	return n > 0, err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// resume picks up the stage's open jobs; intents never recorded as
// created are looked up at the API by display name before anything is
// created (create is not idempotent).
func (d *Driver) resume(ctx context.Context) error {
	if _, shared := d.db.(Leaser); shared {
		// Only the jobs this worker holds: the others' drivers are alive.
		return d.hold(ctx, d.cfg.Now(), true)
	}
	open, err := d.db.BatchJobs(true)
	if err != nil {
		return err
	}
	for _, j := range open {
		if j.Stage != d.stage.Name() {
			continue
		}
		if err := d.track(ctx, j); err != nil {
			return err
		}
	}
	if err := d.relearnAsked(); err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	return nil
}

// queued is how many items wait in the stage's queue.
func (d *Driver) queued() (int, error) {
	c, err := d.db.Counts()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errStore, err)
	}
	for _, s := range c.Stages {
		if s.Stage == d.stage.Name() {
			return s.Queued, nil
		}
	}
	return 0, nil
}

// reserve records the next job's intent from the first *left items of
// the queue (the round's: returned items are behind them); false when
// none is left.
func (d *Driver) reserve(now time.Time, left *int) (bool, error) {
	if *left <= 0 {
		return false, nil
	}
	want := min(d.cfg.Size, *left)
	n, perItem, err := d.fitting(want)
	if err != nil {
		return false, err
	}
	// A job cut short by the budget is the run's last: it waits for the
	// jobs in flight (they may leave room for a whole one), and none
	// follows it. Cut again and again as each settles below its
	// reservation, jobs would shrink by a few items each, one job's
	// latency (minutes to hours) apiece.
	if d.blocked = n < want && (n == 0 || len(d.jobs) > 0 || d.lastJob); d.blocked {
		d.perItem = perItem
		return false, nil
	}
	d.lastJob = d.lastJob || n < want
	job, ok, err := d.db.ReserveBatch(d.stage.Name(), n, now)
	if err != nil || !ok {
		return false, err
	}
	*left -= len(job.Items)
	d.jobs[job.Num] = &tracked{job: job, interval: d.cfg.Poll}
	d.cfg.Log.Info("batch: job reserved", "job", job.Num, "items", len(job.Items), "display_name", job.DisplayName)
	return true, nil
}

// createPending creates the recorded intents, oldest first. It reports
// whether none is left waiting (false after a 429, or while an intent
// that may exist at the API waits to be looked up again).
func (d *Driver) createPending(ctx context.Context, now time.Time) (bool, error) {
	waiting := false
	for _, num := range d.order() {
		t := d.jobs[num]
		if t.job.Name != "" {
			continue
		}
		if t.unsure {
			if now.Before(t.nextLook) {
				waiting = true
				continue
			}
			// It may exist at the API: find it before creating, or before
			// giving up on it (a live job of ours must not go unwatched).
			attached, err := d.attach(ctx, t)
			var ae genai.APIError
			switch {
			case errors.Is(err, errStore), ctx.Err() != nil,
				errors.As(err, &ae) && (ae.Code == http.StatusUnauthorized || ae.Code == http.StatusForbidden):
				return false, err
			case err != nil:
				// Never create while unsure; look again later.
				d.backOffCreate(now, err.Error(), num)
				d.lookAgain(t, d.createAt, now)
				waiting = true
				continue
			case attached:
				continue
			}
			if settled := settledAt(t.job, d.cfg.CreateSettle); now.Before(settled) {
				// Not listed yet is not proof: a create sent a moment ago
				// can still be made (the server finishes it after its
				// client died) or be listed late. Look again once it would
				// have shown, even past the deadline: a job of ours must
				// not run unwatched while its items go elsewhere.
				t.nextLook = settled
				d.cfg.Log.Info("batch: job not listed yet after a create of unknown outcome; looking again before creating",
					"job", num, "display_name", t.job.DisplayName, "at", settled)
				waiting = true
				continue
			}
			t.unsure = false
		}
		if d.pastDeadline(t, now) {
			if err := d.close(t, "not created before the deadline", now); err != nil {
				return false, err
			}
			d.sum.Deadline++
			continue
		}
		if now.Before(d.createAt) {
			// Creates wait; look-ups and deadlines of the later intents
			// do not.
			waiting = true
			continue
		}
		err := d.create(ctx, t, now)
		var ae genai.APIError
		refused := errors.As(err, &ae) && ae.Code >= 400 && ae.Code < 500 && ae.Code != http.StatusRequestTimeout
		switch {
		case err == nil:
			d.createWait = 0
		case refused && ae.Code == http.StatusTooManyRequests:
			d.sum.RateLimited++
			d.backOffCreate(now, "429: too many jobs or enqueued tokens", num)
			waiting = true
		case refused, ctx.Err() != nil, errors.Is(err, errStore):
			return false, err
		default:
			// The job may exist, or may yet: look for it before creating
			// again.
			t.unsure = true
			d.backOffCreate(now, err.Error(), num)
			d.lookAgain(t, d.createAt, now)
			waiting = true
		}
	}
	return !waiting, nil
}

// attach looks for t's display name at the API and records the job found.
func (d *Driver) attach(ctx context.Context, t *tracked) (bool, error) {
	byName, err := d.listByDisplayName(ctx, d.apiFor(t))
	if err != nil {
		return false, err
	}
	found := byName[t.job.DisplayName]
	if len(found) == 0 {
		return false, nil
	}
	if len(found) > 1 {
		d.cfg.Log.Warn("batch: two API jobs carry one display name; attaching the first: the other's answers are never collected, so cancel it at the API",
			"job", t.job.Num, "display_name", t.job.DisplayName, "first", found[0].Name, "other", found[1].Name)
	}
	submitted := found[0].CreateTime
	if submitted.IsZero() {
		submitted = d.cfg.Now()
	}
	rec, err := d.db.SetBatchName(t.job.Num, found[0].Name, string(found[0].State), submitted)
	if two := (*pipeline.TwoBatchJobsError)(nil); errors.As(err, &two) {
		d.cancelUnrecorded(ctx, t, found[0].Name)
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", errStore, err)
	}
	t.job, t.unsure = rec, false
	t.interval, t.nextPoll = d.cfg.Poll, d.cfg.Now()
	d.sum.Reattached++
	d.cfg.Log.Info("batch: re-attached a job created earlier", "job", t.job.Num, "name", rec.Name)
	d.progress()
	return true, nil
}

// order is the open jobs' numbers, oldest first.
func (d *Driver) order() []uint64 {
	nums := make([]uint64, 0, len(d.jobs))
	for n := range d.jobs {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	return nums
}

// close returns a job's unanswered items to the queue and forgets it.
func (d *Driver) close(t *tracked, note string, now time.Time) error {
	n, err := d.db.ReturnBatch(t.job.Num, note, now)
	if err != nil {
		return err
	}
	d.sum.Returned += n
	delete(d.jobs, t.job.Num)
	d.answered(t.job.Num)
	d.release(t.job.Num)
	d.cfg.Log.Info("batch: job closed", "job", t.job.Num, "name", t.job.Name, "returned", n, "note", note)
	d.progress()
	return nil
}

func (d *Driver) progress() {
	if d.cfg.Progress != nil {
		d.cfg.Progress(d.sum)
	}
}

// addUsage counts billed tokens and their price both ways, and returns
// their price at the batch rate.
func (d *Driver) addUsage(u pipeline.Usage) (costUSD float64) {
	d.sum.Usage = d.sum.Usage.Add(u)
	costUSD = d.batchCost(u)
	d.sum.CostUSD += costUSD
	d.sum.OnlineCostUSD += d.onlineCost(u)
	return costUSD
}

// batchCost is u priced at the batch rate.
func (d *Driver) batchCost(u pipeline.Usage) float64 {
	if !d.cfg.Price.IsZero() {
		return d.cfg.Price.Cost(u) * stages.BatchPriceFactor
	}
	in, out := stages.BatchPrice(d.stage.Model())
	return (float64(u.PromptTokens)*in + float64(u.CandidateTokens)*out) / 1e6
}

// onlineCost is u priced at the online rate.
func (d *Driver) onlineCost(u pipeline.Usage) float64 {
	if !d.cfg.Price.IsZero() {
		return d.cfg.Price.Cost(u)
	}
	in, out := stages.Price(d.stage.Model())
	return (float64(u.PromptTokens)*in + float64(u.CandidateTokens)*out) / 1e6
}
