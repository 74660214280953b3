// This file applies --where to every section that counts items: the
// labels and group tables (a tally of the matching items), the item
// counts and the dead letters, and checks each filter's field is one an
// item has.

package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// UnknownFieldError is a filter's field that is neither "label", a group
// field nor an input field of any item: every item would fail the filter,
// most likely because the name is misspelt.
type UnknownFieldError struct {
	// Field is the filter's field as given.
	Field string
	// Known are the fields a filter can name, sorted: "label", the group
	// fields ("month" included) and every input field an item has.
	Known []string
}

// Error names the field and the fields there are.
func (e *UnknownFieldError) Error() string {
	return fmt.Sprintf("filter %s: no item has a field %q (the fields are: %s)", e.Field, e.Field, strings.Join(e.Known, ", "))
}

// fieldSet is the input field names the items read have.
type fieldSet map[string]bool

func (s fieldSet) add(fields map[string]string) {
	for k := range fields {
		s[k] = true
	}
}

// has says whether name is one of the set, ignoring case as fieldValue
// does.
func (s fieldSet) has(name string) bool {
	if s[name] {
		return true
	}
	for k := range s {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// checkFilterFields returns an UnknownFieldError for the first filter
// whose field is neither "label", one of dims nor one of fields. With no
// item read at all nothing can be told apart, and nothing is refused.
func checkFilterFields(where []Filter, dims []string, fields fieldSet, itemsRead int) error {
	if itemsRead == 0 {
		return nil
	}
	for _, f := range where {
		if f.Field == "label" || slices.Contains(dims, f.Field) || fields.has(f.Field) {
			continue
		}
		known := append([]string{"label"}, dims...)
		for k := range fields {
			if !slices.Contains(known, k) {
				known = append(known, k)
			}
		}
		slices.Sort(known)
		return &UnknownFieldError{Field: f.Field, Known: known}
	}
	return nil
}

// tallyFact is f as the stored aggregate folds it: its groups limited to
// the aggregate's group fields (the cube's facts carry the pivot's too).
func tallyFact(f pipeline.Fact, groupBy []string) pipeline.Fact {
	out := pipeline.Fact{Label: f.Label, Rating: f.Rating}
	for _, g := range groupBy {
		if v, ok := f.Groups[g]; ok {
			if out.Groups == nil {
				out.Groups = map[string]string{}
			}
			out.Groups[g] = v
		}
	}
	return out
}

// placeCount counts where the items passing where stand, per stage,
// with the dead letters' reasons, as Counts and ForEachDead would for a
// database holding only them. A store that cannot walk its items
// (PostgreSQL) gives the done items and the dead letters; its queued
// items are not counted. fields gathers the input field names seen.
type placeCount struct {
	agg     *stages.Aggregate
	where   []Filter
	fields  fieldSet
	counts  pipeline.Counts
	byStage map[string]*pipeline.StageCounts
	reasons map[string]map[string]*DeadReason
	// read is the items looked at, matched or not.
	read int
}

func newPlaceCount(names []string, agg *stages.Aggregate, where []Filter) *placeCount {
	pc := &placeCount{agg: agg, where: where, fields: fieldSet{}, byStage: map[string]*pipeline.StageCounts{}, reasons: map[string]map[string]*DeadReason{}}
	for _, n := range names {
		pc.counts.Stages = append(pc.counts.Stages, pipeline.StageCounts{Stage: n})
	}
	for i := range pc.counts.Stages {
		pc.byStage[pc.counts.Stages[i].Stage] = &pc.counts.Stages[i]
	}
	return pc
}

// place counts item it, with status at stage (and its dead letter dl
// when dead), if it passes the filters.
func (pc *placeCount) place(it pipeline.Item, status pipeline.Status, stage string, dl *pipeline.DeadLetter) {
	label, groups := itemFacts(pc.agg, it)
	pc.count(it, status, stage, dl, label, groups)
}

// count is place of an item whose label and groups (as itemFacts gives
// them) are known.
func (pc *placeCount) count(it pipeline.Item, status pipeline.Status, stage string, dl *pipeline.DeadLetter, label string, groups map[string]string) {
	pc.read++
	pc.fields.add(it.Fields)
	if !match(pc.where, label, groups, it.Fields) {
		return
	}
	pc.counts.Items++
	for s := range it.Outputs {
		if sc := pc.byStage[s]; sc != nil {
			sc.Output++
		}
	}
	sc := pc.byStage[stage]
	switch {
	case status == pipeline.StatusDone:
		pc.counts.Done++
	case sc == nil:
	case status == pipeline.StatusDead:
		sc.Dead++
		if dl != nil {
			pc.dead(stage, it.ID, *dl)
		}
	default: // queued, or held by a batch job
		sc.Queued++
	}
}

// dead counts item id's dead letter dl at stage under its reason,
// keeping the first few ids as examples.
func (pc *placeCount) dead(stage, id string, dl pipeline.DeadLetter) {
	key := pipeline.ReasonKey(pipeline.DeadLetter{Class: dl.Class, Message: dl.Message})
	if pc.reasons[stage] == nil {
		pc.reasons[stage] = map[string]*DeadReason{}
	}
	r := pc.reasons[stage][key]
	if r == nil {
		r = &DeadReason{Reason: key}
		pc.reasons[stage][key] = r
	}
	r.Count++
	if len(r.IDs) < 3 {
		r.IDs = append(r.IDs, id)
	}
}

// sortedReasons is the dead reasons per stage, the most frequent first.
func (pc *placeCount) sortedReasons() map[string][]DeadReason {
	out := map[string][]DeadReason{}
	for s, rs := range pc.reasons {
		for _, r := range rs {
			out[s] = append(out[s], *r)
		}
		slices.SortFunc(out[s], func(a, b DeadReason) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
		})
	}
	return out
}

// walkItems calls done with every done item of db, and other with every
// other item and where it stands: in one pass when the store can walk
// its items, else the done items, then the dead of each stage (queued
// items are not read).
func walkItems(db pipeline.Database, names []string, done func(pipeline.Item) error, other func(it pipeline.Item, status pipeline.Status, stage string, dl *pipeline.DeadLetter)) error {
	if w, ok := db.(itemWalker); ok {
		return w.ForEachItem(func(is pipeline.ItemState) error {
			if is.Status == pipeline.StatusDone {
				return done(is.Item)
			}
			other(is.Item, is.Status, is.Stage, is.Dead)
			return nil
		})
	}
	if err := db.ForEachDone(done); err != nil {
		return err
	}
	for _, s := range names {
		err := forEachDeadLocation(db, s, func(loc pipeline.Location) error {
			other(pipeline.Item{Record: loc.Record, Outputs: loc.Output}, pipeline.StatusDead, s, loc.Dead)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// itemFacts is the label and group values a filter sees for an item
// wherever it stands: the aggregate's fact when the item has what it
// counts (a classify label), else no label and the month of its date,
// its other group fields read from its input fields by match.
func itemFacts(agg *stages.Aggregate, it pipeline.Item) (string, map[string]string) {
	if f, err := agg.Fact(it); err == nil {
		return f.Label, f.Groups
	}
	date := fieldValue(it.Fields, cmp.Or(agg.DateField, stages.DefaultDateField))
	if m := stages.MonthOf(strings.TrimSpace(date)); m != stages.Unknown {
		return "", map[string]string{MonthField: m}
	}
	return "", nil
}
