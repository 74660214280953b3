package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// openJob is drain's start for a job (a file, or the one the database
// recorded): build every stage, check the input and the sample, settle a
// changed job before the open when that decides (a dry run, a re-run to
// confirm), open the DB (a stage added to the stored list runs for the
// items already past it) and settle the rest. db is nil when nothing is
// to run: a dry run, or a re-run nobody confirmed.
func openJob(ctx context.Context, req *drainRequest) (*jobStages, *ingest.Plan, pipeline.Database, error) {
	j, o, stderr := req.Job, req.Pipeline, req.ErrOut
	if err := req.Obs.Check(); err != nil {
		return nil, nil, nil, usage(err)
	}
	b, err := buildJob(ctx, j, buildOptions{APIKey: o.APIKey})
	if err != nil {
		return nil, nil, nil, err
	}
	if o.Budget > 0 || o.BudgetTotal > 0 {
		if err := b.checkPriced(); err != nil {
			return nil, nil, nil, err
		}
	}
	// The run's settings the job holds: where it runs, the endpoint the
	// batch jobs go to, the fleet's lease, how its classify preset runs.
	o.DB, o.BaseURL = j.DB, j.BaseURL
	if l := b.lease(); l > 0 {
		o.Lease = l
	}
	req.Batch = b.batchOptions()
	if err := checkDBPath(j.DB, false); err != nil {
		return nil, nil, nil, err
	}
	var plan *ingest.Plan
	if j.Input.Path != "" && req.RetryStage == "" && req.RerunFrom == "" {
		if _, err := os.Stat(jobInputPath(j)); err != nil && req.Resume {
			// The stored job's input is gone (last night's file): resume
			// what the database holds.
			fmt.Fprintf(stderr, "the job's input %s is not there: resuming what %s holds (give --input FILE for new items)\n", jobInputPath(j), j.DB)
		} else if plan, err = checkJobInput(ctx, j, stderr); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := checkJobSample(j, plan); err != nil {
		return nil, nil, nil, err
	}
	if !o.RerunChanged {
		if err := refuseChangeBeforeGrowth(j.DB, b); err != nil {
			return nil, nil, nil, err
		}
	}
	if o.DryRun || o.RerunChanged || req.RerunFrom != "" {
		// Decided before the open, which already writes an added stage.
		if stop, err := consentToJob(ctx, b, req, plan); stop || err != nil {
			return nil, nil, nil, err
		}
	}
	db, err := openJobDatabase(j.DB, b.defs)
	if err != nil {
		return nil, nil, nil, err
	}
	if added := addedStages(db); len(added) > 0 {
		fmt.Fprintf(stderr, "stage %s added to the job: the items already past it go through it (and the stages after it) once; nothing before it is paid again\n", strings.Join(added, ", "))
	}
	if err := settleChanges(db, b, req); err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return b, plan, db, nil
}

// settleChanges compares the job with the one the DB recorded. A stage
// whose answers would change (model, prompt, schema, labels, condition,
// a file's contents) is refused with the diff, unless --rerun-changed:
// then that stage and every stage after it run again. Changes that do not
// change answers (input, limiter, mode) are shown and adopted.
func settleChanges(db jobDatabase, b *jobStages, req *drainRequest) error {
	var diff []job.Change
	if raw, err := db.Job(); err == nil && raw != nil {
		if old, err := job.UnmarshalStored(raw); err == nil {
			diff, _ = job.Diff(old, b.stored)
		}
	}
	added := addedStages(db)
	diff = slices.DeleteFunc(diff, func(c job.Change) bool { return c.Key == "" && slices.Contains(added, c.Stage) })
	changed := db.ChangedStages()
	if len(changed) == 0 {
		if len(diff) > 0 {
			fmt.Fprintf(req.ErrOut, "the job changed since the last run, in ways that change no stage's answers:\n  %s\n", joinChanges(diff))
		}
		return nil
	}
	produced, err := producedFrom(db, changed[0])
	if err != nil {
		return err
	}
	if !produced {
		return db.AcceptDefinition()
	}
	if !req.Pipeline.RerunChanged {
		return changedError(db.Path(), changed, diff)
	}
	n, err := db.Rerun(changed[0])
	if err != nil {
		return err
	}
	if err := db.AcceptDefinition(); err != nil {
		return err
	}
	fmt.Fprintf(req.ErrOut, "stage %s changed:\n  %s\nre-queued %s at %s\n", changed[0], joinChanges(diff), plural(n, "item"), changed[0])
	return nil
}

// consentToJob reads what the run would do and applies the rule a run
// from flags follows: a change nobody asked to re-run is refused, a dry
// run says what would run and stops, and a re-run of more than
// --confirm-above items needs a yes. Nothing is written either way.
func consentToJob(ctx context.Context, b *jobStages, req *drainRequest, input *ingest.Plan) (stop bool, err error) {
	o := req.Pipeline
	w, err := readJobWork(ctx, b, workRequest{RerunChanged: o.RerunChanged, RerunFrom: req.RerunFrom, NoCache: o.NoCache}, input)
	if err != nil {
		return true, err
	}
	if w.Refused {
		return true, changedError(b.job.DB, w.Changed, w.Diff)
	}
	if o.DryRun {
		w.print(req.Out, b.job.DB)
		return true, nil
	}
	if w.Rerun > 0 {
		if err := o.consent().allowRerun(w.Rerun, w.printRerun, req.ErrOut); err != nil {
			return true, err
		}
	}
	return false, nil
}

// changedError refuses a run whose job changed stages that produced
// answers, with the diff.
func changedError(path string, changed []string, diff []job.Change) error {
	msg := fmt.Sprintf("the job changed since %s was last run, in stage %s", path, strings.Join(changed, ", "))
	if len(diff) > 0 {
		msg += ":\n  " + joinChanges(diff)
	}
	return usagef("%s\nRe-running %s and the stages after it re-pays the items that reached it: run again with --rerun-changed to do so, or restore the job as it was (`sawtooth job show --db %s`); nothing was changed",
		msg, changed[0], shellQuote(path))
}

// refuseChangeBeforeGrowth refuses, before the store opens, a job that
// both adds stages and changes a kept one: opening would already record
// the added stages (and re-queue the items past them), and a refusal
// after that would not leave the database as it was. Without added
// stages the refusal comes after the open, which then writes nothing.
func refuseChangeBeforeGrowth(path string, b *jobStages) error {
	if isPostgres(path) {
		return nil // its stage list never grows: Open refuses added stages
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil
	}
	stored, err := store.ReadDefinition(path, 0)
	if err != nil || len(stored) == len(b.defs) {
		return nil // Open says what is wrong, or nothing was added
	}
	fingerprint := map[string]string{}
	for _, d := range b.defs {
		fingerprint[d.Name] = d.Fingerprint
	}
	var changed []string
	for _, d := range stored {
		if fp, kept := fingerprint[d.Name]; kept && fp != d.Fingerprint {
			changed = append(changed, d.Name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	var diff []job.Change
	if raw, err := store.ReadJob(path); err == nil && raw != nil {
		if old, err := job.UnmarshalStored(raw); err == nil {
			diff, _ = job.Diff(old, b.stored)
		}
	}
	return changedError(path, changed, diff)
}

func joinChanges(cs []job.Change) string {
	lines := make([]string, len(cs))
	for i, c := range cs {
		lines[i] = c.String()
	}
	return strings.Join(lines, "\n  ")
}
