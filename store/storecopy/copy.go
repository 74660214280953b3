// Package storecopy moves a sawtooth pipeline from one store to another
// (a bbolt file to PostgreSQL, or back): every item's record, outputs,
// place (queued, dead with its dead letter, done), dead-letter history,
// the tally, the token usage, the run records with their series, the
// learned limits and rates, the answer cache, the money ledgers and the job the
// pipeline was run with. It reads the
// source only through pipeline.Database (and cacheStore) and writes
// through pipeline.Restorer (and cacheStore), so it knows neither
// store's layout. The source must not change meanwhile (stop its
// workers first).
//
// A copy into a bbolt file is made whole beside it and renamed into
// place by the CLI; one into PostgreSQL is staged under a schema no
// command opens and renamed onto the pipeline's schema in one
// transaction (package pgstage). Either way a copy killed halfway leaves
// no partial pipeline for status or run to take as the real one.
package storecopy

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// batchSize is how many items one Restore transaction writes.
const batchSize = 500

// Stats is what Copy moved.
type Stats struct {
	Items, Queued, Dead, Done int
	History                   int
	Runs                      int
	// Answers is the cached answers copied.
	Answers int
}

// TwoPlacesError is an item the source lists in two places (queued at
// two stages, or queued and dead or done): its state is inconsistent,
// and a copy would not know where to put the item. Nothing is copied.
type TwoPlacesError struct {
	// Path is the source's path (a PostgreSQL URL without its password).
	Path, ID string
}

func (e *TwoPlacesError) Error() string {
	return fmt.Sprintf("copy: item %q is in two places in %s: its state is inconsistent", e.ID, e.Path)
}

// OpenBatchJobsError is a source whose open batch jobs hold items:
// neither the jobs nor the items they hold would reach the copy (a job
// is known only where it was created), and its results would land
// nowhere. The copy is refused before it writes anything; once the jobs
// finish or are cancelled it may be tried again.
type OpenBatchJobsError struct {
	Path string
	// Items is how many items the open jobs hold, all stages together.
	Items int
}

func (e *OpenBatchJobsError) Error() string {
	return fmt.Sprintf("copy from %s: open batch jobs hold %d items; let the jobs finish or cancel them, then copy", e.Path, e.Items)
}

// cacheStore is a store that keeps an answer cache and money ledgers
// (pipeline.AnswerCache, pipeline.Ledgers) and can list and restore
// them. Both stores are one.
type cacheStore interface {
	pipeline.Ledgers
	// ForEachAnswer calls fn with every answer cached at stage.
	ForEachAnswer(stage string, fn func(key string, res pipeline.Result) error) error
	// RestoreAnswers caches answers (key -> answer) at stage.
	RestoreAnswers(stage string, answers map[string]pipeline.Result) error
	// AddLedgers adds ls to the stages' lifetime ledgers.
	AddLedgers(ls map[string]pipeline.Ledger) error
}

// Copy moves everything src holds into dst, which must be empty and
// defined with the same stages. progress, if set, is called with the
// items copied so far. After the copy it compares the two stores'
// counts, tallies and usage and returns an error if they differ.
func Copy(src, dst pipeline.Database, progress func(items int)) (Stats, error) {
	var st Stats
	rest, err := target(src, dst)
	if err != nil {
		return st, err
	}
	if err := copyItems(src, &itemWriter{rest: rest, st: &st, progress: progress}); err != nil {
		return st, err
	}
	if err := copyBooks(src, dst, rest, &st); err != nil {
		return st, err
	}
	return st, Compare(src, dst)
}

// target is dst as a store to restore into, or why src cannot be copied
// into it.
func target(src, dst pipeline.Database) (pipeline.Restorer, error) {
	rest, ok := dst.(pipeline.Restorer)
	if !ok {
		return nil, fmt.Errorf("copy to %s: this store cannot be restored into", dst.Path())
	}
	if a, b := pipeline.StageNames(src.Stages()), pipeline.StageNames(dst.Stages()); !slices.Equal(a, b) {
		return nil, fmt.Errorf("copy: %s has the stages %v, %s has %v", src.Path(), a, dst.Path(), b)
	}
	if err := noOpenBatchJobs(src); err != nil {
		return nil, err
	}
	if c, err := dst.Counts(); err != nil {
		return nil, err
	} else if c.Items > 0 {
		return nil, fmt.Errorf("copy to %s: it already holds %d items; copy into a new, empty database", dst.Path(), c.Items)
	}
	return rest, nil
}

// copyItems copies every item of src, each with its place, outputs and
// history, through w.
func copyItems(src pipeline.Database, w *itemWriter) error {
	ids, err := itemIDs(src)
	if err != nil {
		return err
	}
	w.batch = make([]pipeline.Location, 0, batchSize)
	for _, id := range ids {
		loc, err := src.Locate(id)
		if err != nil {
			return fmt.Errorf("read item %q from %s: %w", id, src.Path(), err)
		}
		if err := w.add(loc); err != nil {
			return err
		}
	}
	return w.flush()
}

// itemWriter restores items batchSize at a time, counting them in st.
type itemWriter struct {
	rest     pipeline.Restorer
	batch    []pipeline.Location
	st       *Stats
	progress func(items int)
}

func (w *itemWriter) add(loc pipeline.Location) error {
	switch loc.Status {
	case "queued":
		w.st.Queued++
	case "dead":
		w.st.Dead++
	case "done":
		w.st.Done++
	}
	w.st.History += len(loc.History)
	w.batch = append(w.batch, loc)
	if len(w.batch) == batchSize {
		return w.flush()
	}
	return nil
}

func (w *itemWriter) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	if err := w.rest.Restore(w.batch); err != nil {
		return err
	}
	w.st.Items += len(w.batch)
	w.batch = w.batch[:0]
	if w.progress != nil {
		w.progress(w.st.Items)
	}
	return nil
}

// copyBooks copies what src keeps beside its items: usage, run records,
// learned limits and rates, the answer cache with the ledgers, and the job.
func copyBooks(src, dst pipeline.Database, rest pipeline.Restorer, st *Stats) error {
	usage, err := src.Usage()
	if err != nil {
		return err
	}
	if err := rest.AddUsage(usage); err != nil {
		return err
	}
	if st.Runs, err = copyRuns(src, dst); err != nil {
		return err
	}
	for _, s := range src.Stages() {
		// The rate beside the limit too: a limit with no rate is climbed
		// from in slow start, which after a quota storm runs into it.
		for _, key := range []string{s.Name, pipeline.QuotaRateKey(s.Name)} {
			if n := src.LearnedLimit(key); n > 0 {
				if err := dst.SetLearnedLimit(key, n); err != nil {
					return err
				}
			}
		}
	}
	if st.Answers, err = copyCache(src, dst); err != nil {
		return err
	}
	return copyJob(src, dst)
}

// jobStore is a store that records the job it is run with (both are).
type jobStore interface {
	SaveJob(job []byte) error
	Job() ([]byte, error)
}

// copyJob copies the job src records, if any.
func copyJob(src, dst pipeline.Database) error {
	from, ok := src.(jobStore)
	if !ok {
		return nil
	}
	job, err := from.Job()
	if err != nil || job == nil {
		return err
	}
	to, ok := dst.(jobStore)
	if !ok {
		return fmt.Errorf("copy to %s: this store cannot record the job %s was run with", dst.Path(), src.Path())
	}
	return to.SaveJob(job)
}

// copyCache copies the answer cache, stage by stage in batches, and the
// ledgers, when src keeps them. It returns how many answers it copied.
func copyCache(src, dst pipeline.Database) (int, error) {
	from, ok := src.(cacheStore)
	if !ok {
		return 0, nil
	}
	ledgers, err := from.Ledgers()
	if err != nil {
		return 0, err
	}
	to, ok := dst.(cacheStore)
	if !ok {
		if len(ledgers) > 0 {
			return 0, fmt.Errorf("copy to %s: this store keeps no answer cache nor money ledger, and %s has them", dst.Path(), src.Path())
		}
		return 0, nil
	}
	n := 0
	for _, s := range src.Stages() {
		batch := map[string]pipeline.Result{}
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			if err := to.RestoreAnswers(s.Name, batch); err != nil {
				return err
			}
			n += len(batch)
			clear(batch)
			return nil
		}
		err := from.ForEachAnswer(s.Name, func(key string, res pipeline.Result) error {
			batch[key] = res
			if len(batch) == batchSize {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			return n, fmt.Errorf("copy the answer cache of %s: %w", s.Name, err)
		}
	}
	if err := to.AddLedgers(ledgers); err != nil {
		return n, err
	}
	return n, nil
}

// itemIDs lists every item of db: the queued ones stage by stage in
// queue order (so the copy keeps each queue's order), then the dead,
// then the done.
func itemIDs(db pipeline.Database) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	add := func(id string) error {
		if seen[id] {
			return &TwoPlacesError{Path: db.Path(), ID: id}
		}
		seen[id] = true
		ids = append(ids, id)
		return nil
	}
	for _, s := range db.Stages() {
		var after uint64
		for {
			qs, err := db.Queued(s.Name, after, 1000)
			if err != nil {
				return nil, err
			}
			if len(qs) == 0 {
				break
			}
			for _, q := range qs {
				if err := add(q.Item.ID); err != nil {
					return nil, err
				}
				after = q.Seq
			}
		}
	}
	for _, s := range db.Stages() {
		if err := db.ForEachDead(s.Name, func(e pipeline.DeadEntry) error { return add(e.ID) }); err != nil {
			return nil, err
		}
	}
	if err := db.ForEachDone(func(it pipeline.Item) error { return add(it.ID) }); err != nil {
		return nil, err
	}
	return ids, nil
}

// copyRuns copies the run records, oldest first, with their series.
func copyRuns(src, dst pipeline.Database) (int, error) {
	runs, err := src.Runs(1 << 30)
	if err != nil {
		return 0, err
	}
	slices.Reverse(runs)
	for _, r := range runs {
		if err := dst.SaveRun(r); err != nil {
			return 0, err
		}
		samples, err := src.Samples(r.ID)
		if err != nil {
			return 0, err
		}
		if len(samples) > 0 {
			if err := dst.AppendSamples(r.ID, samples); err != nil {
				return 0, err
			}
		}
	}
	return len(runs), nil
}

// Compare checks that two stores hold the same pipeline state: counts,
// tally and usage. It returns an error naming each difference.
func Compare(a, b pipeline.Database) error {
	var errs []error
	ca, err := a.Counts()
	if err != nil {
		return err
	}
	cb, err := b.Counts()
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(ca, cb) {
		errs = append(errs, fmt.Errorf("counts differ: %s has %+v, %s has %+v", a.Path(), ca, b.Path(), cb))
	}
	ta, err := a.Tally()
	if err != nil {
		return err
	}
	tb, err := b.Tally()
	if err != nil {
		return err
	}
	for _, d := range ta.Diff(tb) {
		errs = append(errs, fmt.Errorf("tallies differ (%s, then %s): %s", a.Path(), b.Path(), d))
	}
	ua, err := a.Usage()
	if err != nil {
		return err
	}
	ub, err := b.Usage()
	if err != nil {
		return err
	}
	if !maps.Equal(nonZero(ua), nonZero(ub)) {
		errs = append(errs, fmt.Errorf("usage differs: %s has %v, %s has %v", a.Path(), ua, b.Path(), ub))
	}
	if err := compareCache(a, b); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// compareCache compares the ledgers, and the number of cached answers
// per stage, of two stores that both keep them.
func compareCache(a, b pipeline.Database) error {
	ca, okA := a.(cacheStore)
	cb, okB := b.(cacheStore)
	if !okA || !okB {
		return nil
	}
	la, err := ca.Ledgers()
	if err != nil {
		return err
	}
	lb, err := cb.Ledgers()
	if err != nil {
		return err
	}
	var errs []error
	if !maps.EqualFunc(la, lb, sameLedger) {
		errs = append(errs, fmt.Errorf("money ledgers differ: %s has %v, %s has %v", a.Path(), la, b.Path(), lb))
	}
	for _, s := range a.Stages() {
		na, err := countAnswers(ca, s.Name)
		if err != nil {
			return err
		}
		nb, err := countAnswers(cb, s.Name)
		if err != nil {
			return err
		}
		if na != nb {
			errs = append(errs, fmt.Errorf("cached answers of %s differ: %s has %d, %s has %d", s.Name, a.Path(), na, b.Path(), nb))
		}
	}
	return errors.Join(errs...)
}

// sameLedger compares ledgers to the nanodollar, as both stores keep them.
func sameLedger(x, y pipeline.Ledger) bool {
	var a, b pipeline.LedgerSum
	a.AddLedger(x)
	b.AddLedger(y)
	return a == b
}

func countAnswers(c cacheStore, stage string) (int, error) {
	n := 0
	err := c.ForEachAnswer(stage, func(string, pipeline.Result) error { n++; return nil })
	return n, err
}

func nonZero(u map[string]pipeline.Usage) map[string]pipeline.Usage {
	out := map[string]pipeline.Usage{}
	for k, v := range u {
		if v != (pipeline.Usage{}) {
			out[k] = v
		}
	}
	return out
}

// noOpenBatchJobs refuses a source whose open batch jobs hold items:
// neither the jobs nor the items they hold would reach the copy (a job is
// known only where it was created), and its results would land nowhere.
func noOpenBatchJobs(src pipeline.Database) error {
	b, ok := src.(interface {
		InBatchCount() (map[string]int, error)
	})
	if !ok {
		return nil
	}
	held, err := b.InBatchCount()
	if err != nil {
		return err
	}
	n := 0
	for _, c := range held {
		n += c
	}
	if n > 0 {
		return &OpenBatchJobsError{Path: src.Path(), Items: n}
	}
	return nil
}
