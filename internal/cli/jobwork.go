// This file reads, before anything is written, what a job's run would do
// with the database the job names: the stages it adds, the changed stages
// it refuses or re-runs, the input's new and edited items, and per stage
// the items that would reach it and the calls they would make. `plan`, a
// dry run and the --confirm-above question all read this one account, so
// each says what the run then does.

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// workRequest is what a run was asked that changes its work.
type workRequest struct {
	// RerunChanged re-runs the changed stages instead of refusing them;
	// RerunFrom re-runs every item from that stage (rerun --from-stage).
	RerunChanged bool
	RerunFrom    string
	// NoCache asks the API for every item: no answer is reused.
	NoCache bool
}

// jobWork is what a job's run would do, as its database tells before
// any call or write.
type jobWork struct {
	// Exists says the database holds a pipeline already.
	Exists bool
	// Diff is the job against the one the database stored; Added the
	// stages the job adds to the stored list.
	Diff  []job.Change
	Added []string
	// Changed lists the stages whose answers would change and that have
	// produced some; Refused says the run refuses them (no
	// --rerun-changed).
	Changed []string
	Refused bool
	// RerunFrom is the first stage the run sends items back to (a changed
	// stage re-run, or rerun --from-stage), RerunStages it and every stage
	// after it, and Rerun how many items go back.
	RerunFrom   string
	RerunStages []string
	Rerun       int
	// Stored is the items the database holds; New and Edited the input's
	// items it has not seen, and those it holds with other content that
	// re-enter a stage.
	Stored, New, Edited int
	// Stages is each stage's work, in the job's order.
	Stages []job.StageWork
}

// work is the item walk's state: the job's stages and where the run
// would send the items.
type work struct {
	ctx   context.Context
	b     *jobStages
	db    pipeline.Database // nil: no database yet
	req   workRequest
	w     *jobWork
	index map[string]int // stage name -> position in the job
	// added and rerun are the positions the run sends items back to (-1:
	// none).
	added, rerun int
	// keys holds, per LLM stage, the questions the walk already counted
	// as a call: a second item asking the same one reuses its answer.
	keys map[string]map[string]bool
	// texts is each LLM stage's condition, prompt and system instruction,
	// searched for the stages it reads.
	texts map[string]string
	words map[string]*regexp.Regexp
}

// readJobWork reads what running b's job would do; input is the input
// the run would ingest (nil: none). It opens the database read-only and
// calls nothing.
func readJobWork(ctx context.Context, b *jobStages, req workRequest, input *ingest.Plan) (*jobWork, error) {
	wk := &work{ctx: ctx, b: b, req: req, w: &jobWork{}, index: map[string]int{}, added: -1, rerun: -1, keys: map[string]map[string]bool{}, words: map[string]*regexp.Regexp{}}
	for i, d := range b.defs {
		wk.index[d.Name] = i
		wk.w.Stages = append(wk.w.Stages, job.StageWork{Stage: d.Name})
	}
	path := b.job.DB
	if dbExists(path) {
		stored, err := readStoredStages(path, 0)
		if err != nil {
			return nil, err
		}
		db, err := openDatabase(path, dbOpen{Stages: stored, ReadOnly: true, MustExist: true}, func() (*store.DB, error) {
			return store.Open(path, store.Options{Stages: stored, ReadOnly: true})
		})
		if err != nil {
			return nil, err
		}
		defer db.Close()
		wk.db, wk.w.Exists = db, true
		if err := wk.settle(stored); err != nil {
			return nil, err
		}
	}
	var hashes map[string]string
	if input != nil {
		hashes = map[string]string{}
		if _, err := input.Apply(ctx, ingestBatch, func(recs []pipeline.Record) error {
			for _, r := range recs {
				hashes[r.ID] = r.ContentHash()
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	edited, err := wk.walkStored(hashes)
	if err != nil {
		return nil, err
	}
	if input != nil {
		if _, err := input.Apply(ctx, ingestBatch, func(recs []pipeline.Record) error {
			for _, r := range recs {
				wk.ingested(r, edited, hashes)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return wk.w, nil
}

// dbExists says whether path holds a pipeline (a database file with
// content, or a PostgreSQL pipeline).
func dbExists(path string) bool {
	if isPostgres(path) {
		exists, _ := postgresPipelineExists(path, false)
		return exists
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Size() > 0
}

// settle compares the job with the stored stage list and job, as the
// open, settleChanges and rerunJobFrom then act on it.
func (wk *work) settle(stored []store.StageDef) error {
	b, w := wk.b, wk.w
	fp := map[string]string{}
	for _, d := range stored {
		fp[d.Name] = d.Fingerprint
	}
	for i, d := range b.defs {
		old, kept := fp[d.Name]
		switch {
		case !kept:
			w.Added = append(w.Added, d.Name)
			if wk.added < 0 {
				wk.added = i
			}
		case old != d.Fingerprint:
			w.Changed = append(w.Changed, d.Name)
		}
	}
	if len(w.Added) > 0 && isPostgres(b.job.DB) {
		return usagef("--db %s: a PostgreSQL pipeline keeps the stage list it was created with (adding a stage is for a database file): run the job in another database, or keep its stages", wk.db.Path())
	}
	if jdb, ok := wk.db.(jobDatabase); ok {
		if raw, err := jdb.Job(); err == nil && raw != nil {
			if old, err := job.UnmarshalStored(raw); err == nil {
				w.Diff, _ = job.Diff(old, b.stored)
			}
		}
	}
	w.Diff = slices.DeleteFunc(w.Diff, func(c job.Change) bool { return c.Key == "" && slices.Contains(w.Added, c.Stage) })
	if len(w.Changed) > 0 {
		produced, err := producedFrom(wk.db, w.Changed[0])
		if err != nil {
			return err
		}
		switch {
		case !produced:
			w.Changed = nil // adopted: nothing was answered under the old job
		case !wk.req.RerunChanged:
			w.Refused = true
		default:
			wk.rerun = wk.index[w.Changed[0]]
		}
	}
	if i, ok := wk.index[wk.req.RerunFrom]; ok && wk.req.RerunFrom != "" && (wk.rerun < 0 || i < wk.rerun) {
		wk.rerun = i
	}
	if wk.rerun >= 0 {
		w.RerunFrom = b.defs[wk.rerun].Name
		for _, d := range b.defs[wk.rerun:] {
			w.RerunStages = append(w.RerunStages, d.Name)
		}
	}
	return nil
}

// storedItem is one item the database holds, where it stands.
type storedItem struct {
	item pipeline.Item
	// at is its stage's position in the job; done and dead its status
	// (neither: queued).
	at         int
	done, dead bool
}

// walkStored accounts for every item the database holds: queued ones
// run on, the run's added stage and re-run send some back. An item the
// input holds with other content (hashes) is returned instead, for
// ingested to account for with its new record.
func (wk *work) walkStored(hashes map[string]string) (map[string]storedItem, error) {
	edited := map[string]storedItem{}
	if wk.db == nil {
		return edited, nil
	}
	visit := func(s storedItem) {
		wk.w.Stored++
		if h, ok := hashes[s.item.ID]; ok {
			// Met: what is left in hashes after the walk is new.
			delete(hashes, s.item.ID)
			if h != s.item.ContentHash() {
				edited[s.item.ID] = s
				return
			}
		}
		if start, _ := wk.position(s); start >= 0 {
			wk.enter(start, s.item)
		}
	}
	const page = 500
	var dead []storedItem
	for _, st := range wk.db.Stages() {
		at := wk.index[st.Name]
		for after := uint64(0); ; {
			qs, err := wk.db.Queued(st.Name, after, page)
			if err != nil {
				return nil, err
			}
			for _, q := range qs {
				visit(storedItem{item: q.Item, at: at})
			}
			if len(qs) < page {
				break
			}
			after = qs[len(qs)-1].Seq
		}
		if err := wk.db.ForEachDead(st.Name, func(d pipeline.DeadEntry) error {
			dead = append(dead, storedItem{item: pipeline.Item{Record: pipeline.Record{ID: d.ID}}, at: at, dead: true})
			return nil
		}); err != nil {
			return nil, err
		}
	}
	last := len(wk.b.defs) - 1
	if err := wk.db.ForEachDone(func(it pipeline.Item) error {
		visit(storedItem{item: it, at: last, done: true})
		return nil
	}); err != nil {
		return nil, err
	}
	// A dead letter's record and outputs are read after the walk: the
	// store is not read inside its own iteration.
	for _, s := range dead {
		loc, err := wk.db.Locate(s.item.ID)
		if err != nil {
			return nil, err
		}
		s.item = pipeline.Item{Record: loc.Record, Outputs: loc.Output}
		visit(s)
	}
	return edited, nil
}

// position is where the run would start s (-1: it stays where it is,
// done or dead) and whether the re-run moves it there.
func (wk *work) position(s storedItem) (start int, rerun bool) {
	start, at := -1, s.at
	if !s.done && !s.dead {
		start = at
	}
	if wk.added >= 0 && (s.done || at >= wk.added) {
		// The open sends every item past the added stage back to it.
		start, at, s.done = wk.added, wk.added, false
	}
	if wk.rerun >= 0 && (s.done || at >= wk.rerun) {
		start, rerun = wk.rerun, true
		wk.w.Rerun++
	}
	return start, rerun
}

// ingested accounts for one input record: a new id runs every stage, an
// edited one re-enters at the first stage that reads what changed (as
// the store's Ingest decides), an unchanged one was accounted for. unmet
// holds the ids the walk did not meet in the database.
func (wk *work) ingested(r pipeline.Record, edited map[string]storedItem, unmet map[string]string) {
	s, ok := edited[r.ID]
	if !ok {
		if _, new := unmet[r.ID]; new {
			delete(unmet, r.ID) // a second line with the id is not a second item
			wk.w.New++
			wk.enter(0, pipeline.Item{Record: r})
		}
		return
	}
	delete(edited, r.ID)
	start, _ := wk.position(s)
	changed := pipeline.ChangedFields(s.item.Record, r)
	from := len(wk.b.defs)
	for i, d := range wk.b.defs {
		if d.ReadsAny(changed) {
			from = i
			break
		}
	}
	reached := s.at
	if start >= 0 {
		reached = start
	}
	if from < len(wk.b.defs) && (s.done || reached >= from) && (start < 0 || from < start) {
		start = from
		wk.w.Edited++
	}
	if start >= 0 {
		s.item.Record = r
		wk.enter(start, s.item)
	}
}

// enter accounts for one item the run sends from stage start through the
// last. Its outputs before start are known, and so are those the plan can
// make without calling: sanitize's (run here: it is local and pure), a
// condition's skip and an answer the cache keeps. An LLM stage whose
// condition and prompt read only known outputs decides exactly whether it
// calls; one that reads an answer the run has yet to make counts the item
// as Open.
func (wk *work) enter(start int, it pipeline.Item) {
	outs := map[string]json.RawMessage{}
	for _, d := range wk.b.defs[:start] {
		if o, ok := it.Outputs[d.Name]; ok {
			outs[d.Name] = o
		}
	}
	unknown := map[string]bool{}
	for i := start; i < len(wk.b.defs); i++ {
		sw, st := &wk.w.Stages[i], wk.b.stages[i].Stage
		sw.Items++
		it.Outputs, it.Prev = outs, nil
		if i > 0 {
			it.Prev = outs[wk.b.defs[i-1].Name]
		}
		switch s := wk.b.job.Stages[i]; {
		case s.Sanitize != nil:
			res, err := st.Process(wk.ctx, it)
			if err != nil {
				return // dead-lettered here, before any later stage
			}
			if len(res.Output) > 0 {
				outs[sw.Stage] = res.Output
			}
		case s.LLM != nil:
			if wk.readsAny(i, unknown) {
				sw.Open++
				unknown[sw.Stage] = true
				continue
			}
			out, known, dead := wk.decide(sw, st, it)
			switch {
			case dead:
				return
			case known:
				outs[sw.Stage] = out
			default:
				unknown[sw.Stage] = true
			}
		}
	}
}

// readsAny says whether LLM stage i may read an output of a stage in
// names: its condition, prompt or system instruction names the stage, or
// the stage just before it answers in a schema (whose text field would be
// the item's text).
func (wk *work) readsAny(i int, names map[string]bool) bool {
	if len(names) == 0 {
		return false
	}
	if i > 0 {
		prev := wk.b.defs[i-1].Name
		if l := wk.b.llm[prev]; names[prev] && l != nil && l.Output.SchemaFile != "" {
			return true
		}
	}
	if wk.texts == nil {
		wk.texts = map[string]string{}
		for name, l := range wk.b.llm {
			t := l.When + "\x00" + l.Prompt + "\x00" + l.System
			for _, f := range []string{l.PromptFile, l.SystemFile} {
				if f != "" {
					b, _ := wk.b.job.ReadFile(f)
					t += "\x00" + string(b)
				}
			}
			wk.texts[name] = t
		}
	}
	text := wk.texts[wk.b.defs[i].Name]
	for name := range names {
		re := wk.words[name]
		if re == nil {
			re = regexp.MustCompile(`(^|[^\w])` + regexp.QuoteMeta(name) + `($|[^\w])`)
			wk.words[name] = re
		}
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// decide counts what an LLM stage does with an item whose input is
// known: skipped by its condition or answered from the cache (its output
// then known), answered by an earlier item of this run asking the same
// question, refused without a call (dead), or a call.
func (wk *work) decide(sw *job.StageWork, st pipeline.Stage, it pipeline.Item) (out json.RawMessage, known, dead bool) {
	if sk, ok := st.(pipeline.Skipper); ok {
		if res, skip := sk.Skip(wk.ctx, it); skip {
			sw.Skipped++
			return res.Output, true, false
		}
	}
	c, ok := st.(pipeline.Cacheable)
	if !ok {
		sw.Calls++
		return nil, false, false
	}
	key, err := c.CacheKey(it)
	if err != nil {
		sw.Refused++ // its prompt cannot be made: dead-lettered, no call
		return nil, false, true
	}
	if wk.req.NoCache {
		sw.Calls++
		return nil, false, false
	}
	seen := wk.keys[sw.Stage]
	if seen == nil {
		seen = map[string]bool{}
		wk.keys[sw.Stage] = seen
	}
	if seen[key] {
		sw.Cached++ // the answer this run makes for the first asker
		return nil, false, false
	}
	seen[key] = true
	if ac, ok := wk.db.(pipeline.AnswerCache); ok {
		if res, found, err := ac.CachedAnswer(sw.Stage, key); err == nil && found {
			sw.Cached++
			return res.Output, true, false
		}
	}
	sw.Calls++
	return nil, false, false
}

// printRerun writes the re-run as one paragraph a person can decide on.
func (w *jobWork) printRerun(out io.Writer) {
	fmt.Fprintf(out, "would re-run %s for %s: %s\n", strings.Join(w.RerunStages, ", "), plural(w.Rerun, "item"), w.callsLine(w.RerunFrom))
}

// callsLine says, per LLM stage from stage on, the calls the run would
// make.
func (w *jobWork) callsLine(from string) string {
	var parts []string
	on := from == ""
	for _, s := range w.Stages {
		on = on || s.Stage == from
		if !on || s.Items == 0 {
			continue
		}
		if s.Calls+s.Open+s.Cached+s.Skipped+s.Refused == 0 {
			continue // not an LLM stage
		}
		p := fmt.Sprintf("%s %s", s.Stage, plural(s.Calls, "call"))
		if s.Open > 0 {
			p += fmt.Sprintf(" and up to %d more (items whose condition or prompt reads answers this run makes)", s.Open)
		}
		if s.Cached > 0 {
			p += fmt.Sprintf(", %d answered from the cache", s.Cached)
		}
		if s.Skipped > 0 {
			p += fmt.Sprintf(", %d left out by its when:", s.Skipped)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "no API calls, nothing to pay"
	}
	return strings.Join(parts, "; ")
}

// print says what the run would do, for a dry run.
func (w *jobWork) print(out io.Writer, db string) {
	if !w.Exists {
		fmt.Fprintf(out, "no database at %s yet: the run would create it\n", db)
	}
	if len(w.Diff) > 0 {
		fmt.Fprintf(out, "the job changed since the last run:\n  %s\n", joinChanges(w.Diff))
	}
	if len(w.Added) > 0 {
		fmt.Fprintf(out, "stage %s added: the items already past it would go through it (and the stages after it) once\n", strings.Join(w.Added, ", "))
	}
	if w.Rerun > 0 {
		w.printRerun(out)
	}
	if w.New > 0 || w.Edited > 0 {
		fmt.Fprintf(out, "the input adds %s", plural(w.New, "new item"))
		if w.Edited > 0 {
			fmt.Fprintf(out, " and re-runs %s", plural(w.Edited, "edited item"))
		}
		fmt.Fprintln(out)
	}
	var items []string
	for _, s := range w.Stages {
		if s.Items > 0 {
			items = append(items, fmt.Sprintf("%s %d", s.Stage, s.Items))
		}
	}
	if len(items) == 0 {
		fmt.Fprintln(out, "would run nothing: every item is done; nothing was changed")
		return
	}
	fmt.Fprintf(out, "would run (items per stage) %s: %s; nothing was changed\n", strings.Join(items, ", "), w.callsLine(""))
}
