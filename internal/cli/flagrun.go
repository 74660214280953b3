package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// openFlags is drain's start from flags: check the flags, build the job
// they compile to and open its database, settling a changed
// configuration (reconcile). db is nil when nothing is to run: a dry
// run, or a re-run nobody confirmed.
func openFlags(ctx context.Context, req *drainRequest) (*jobStages, *ingest.Plan, pipeline.Database, error) {
	o := req.Pipeline
	b, input, exists, err := checkAndBuild(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	if o.DryRun && !exists {
		fmt.Fprintf(req.Out, "no database at %s yet: nothing would be re-run\n", o.DB)
		return nil, nil, nil, nil
	}
	db, err := o.openDB(b)
	if err != nil {
		return nil, nil, nil, err
	}
	if stop, err := reconcile(db, b, *req); stop || err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return b, input, db, nil
}

// checkAndBuild checks every argument of req (nothing is opened for
// writing or created yet) and reads the input once to accept it (input,
// applied after the DB is open), keeps the recorded settings when asked,
// and builds the stages. exists says the DB file holds something.
func checkAndBuild(ctx context.Context, req *drainRequest) (b *jobStages, input *ingest.Plan, exists bool, err error) {
	o, in := req.Pipeline, &req.Input
	if err := req.Obs.Check(); err != nil {
		return nil, nil, false, usage(err)
	}
	// The database first: a --stage is not to blame when there is none.
	if err := checkDBPath(o.DB, o.MustExist); err != nil {
		return nil, nil, false, err
	}
	if req.RerunFrom != "" {
		if err := checkStage("from-stage", req.RerunFrom); err != nil {
			return nil, nil, false, err
		}
	}
	if req.RetryStage != "" {
		if err := checkStage("stage", req.RetryStage); err != nil {
			return nil, nil, false, err
		}
	}
	if _, err := req.Batch.check(); err != nil {
		return nil, nil, false, err
	}
	if isPostgres(o.DB) {
		if exists, err = postgresPipelineExists(o.DB, true); err != nil {
			return nil, nil, false, err
		}
	} else if fi, err := os.Stat(o.DB); err == nil && fi.Size() > 0 {
		exists = true
	}
	if exists && o.KeepStored {
		if err := keepRecorded(o, req); err != nil {
			return nil, nil, false, err
		}
	}
	if in.Path != "" {
		if input, err = checkInput(ctx, o, in, req.ErrOut); err != nil {
			return nil, nil, false, err
		}
	}
	if b, err = o.buildStages(ctx, req.Input, req.Batch); err != nil {
		return nil, nil, false, err
	}
	return b, input, exists, wordFlagSample(checkJobSample(b.job, input), o.PromptFile)
}

// reconcile settles a configuration change and an asked-for re-run before
// anything is ingested: it refuses an unasked change, prints the plan of
// a dry run (stop), stops a re-run above --confirm-above that nobody
// confirmed, or re-queues the items and records the new definition.
func reconcile(db pipeline.Database, b *jobStages, req drainRequest) (stop bool, err error) {
	o := req.Pipeline
	from, why, err := rerunStart(db, b, req)
	if err != nil {
		return true, err
	}
	if from == "" {
		if o.DryRun {
			fmt.Fprintf(req.Out, "nothing would be re-run: no stage's configuration changed since %s was last run\n", o.DB)
		}
		return o.DryRun, nil
	}
	plan, err := planRerun(db, from, b.classifyCost)
	if err != nil {
		return true, err
	}
	if o.DryRun {
		plan.print(req.Out)
		return true, nil
	}
	if err := o.consent().allowRerun(plan.Items, plan.print, req.ErrOut); err != nil {
		return true, err
	}
	n, err := db.Rerun(from)
	if err != nil {
		return true, err
	}
	if err := db.AcceptDefinition(); err != nil {
		return true, err
	}
	fmt.Fprintf(req.ErrOut, "%s: re-queued %s at %s\n", why, plural(n, "item"), from)
	return false, nil
}

// rerunStart decides where re-running starts, and why: at the first stage
// whose configuration changed (when it produced anything, and the user
// asked for it with --rerun-changed or rerun), or at req.RerunFrom if that
// is earlier. A change nobody asked to re-run is refused, with what
// changed; a change to a stage that produced nothing is adopted.
func rerunStart(db pipeline.Database, b *jobStages, req drainRequest) (from, why string, err error) {
	o := req.Pipeline
	if changed := db.ChangedStages(); len(changed) > 0 {
		produced, err := producedFrom(db, changed[0])
		if err != nil {
			return "", "", err
		}
		switch {
		case !produced:
			// Nothing was ever produced under the old configuration (say a
			// run that stopped at once on an unknown model): adopt the new one.
			if !o.DryRun {
				if err := db.AcceptDefinition(); err != nil {
					return "", "", err
				}
			}
		case !o.RerunChanged && req.RerunFrom == "":
			return "", "", configChanged(db, b, changed[0])
		default:
			from, why = changed[0], "the configuration of "+changed[0]+" changed"
		}
	}
	if req.RerunFrom != "" && (from == "" || stageIndex(req.RerunFrom) < stageIndex(from)) {
		if from != "" {
			why += ", and rerun --from-stage " + req.RerunFrom + " was asked"
		} else {
			why = "rerun --from-stage " + req.RerunFrom
		}
		from = req.RerunFrom
	}
	return from, why, nil
}

// configChanged is the refusal of a configuration change at stage: what
// changed, as a diff when the DB recorded the settings, and the commands
// that decide.
func configChanged(db pipeline.Database, b *jobStages, stage string) error {
	var diff []string
	if old, err := db.StoredDefinition(); err == nil {
		stored := storedSettings(old)
		for _, d := range b.defs {
			if d.Name == stage {
				diff = settingsDiff(stage, stored[stage], d.Config)
			}
		}
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "the configuration of stage %s changed since %s was last run", stage, db.Path())
	if len(diff) > 0 {
		msg.WriteString(":\n  " + strings.Join(diff, "\n  "))
	} else {
		msg.WriteString(" (model, labels, prompt or options)")
	}
	fmt.Fprintf(&msg, "\nRe-running %s and the stages after it re-pays every item. To see what it would cost, run the same command with --rerun-changed --dry-run;"+
		" then with --rerun-changed to re-run, or run again with the previous settings.", stage)
	return usagef("%s", msg.String())
}

// stageIndex is name's position in the pipeline, or len(stageNames).
func stageIndex(name string) int {
	for i, s := range stageNames {
		if s == name {
			return i
		}
	}
	return len(stageNames)
}

// readDefinition reads the pipeline definition recorded in the DB at
// path without opening it for writing. A database file is read for its
// one meta key, not opened as a store: that open's checks load the
// file's dictionary, which the writable open that follows loads again.
func readDefinition(path string) ([]store.StageDef, error) {
	if !isPostgres(path) {
		defs, err := store.ReadDefinition(path, 0)
		if err != nil {
			return nil, wordStoreError(err, "--db")
		}
		return defs, nil
	}
	db, err := openDatabase(path, dbOpen{Stages: namedStages(), ReadOnly: true, MustExist: true}, func() (*store.DB, error) {
		return store.Open(path, store.Options{Stages: namedStages(), ReadOnly: true})
	})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.StoredDefinition()
}

// producedFrom reports whether any item has an output or a dead letter at
// stage or a later one: whether a configuration change there matters.
func producedFrom(db pipeline.Database, stage string) (bool, error) {
	counts, err := db.Counts()
	if err != nil {
		return false, err
	}
	from := false
	for _, s := range counts.Stages {
		from = from || s.Stage == stage
		if from && (s.Output > 0 || s.Dead > 0) {
			return true, nil
		}
	}
	return false, nil
}
