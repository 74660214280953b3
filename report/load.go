package report

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// Filter keeps the items whose field equals a value (--where field=value).
// The field is "label", a group field ("month" included) or any input
// field, matched exactly or else ignoring case.
type Filter struct {
	Field, Value string
}

// String is "field=value".
func (f Filter) String() string { return f.Field + "=" + f.Value }

// ParseFilters reads filters written field=value; a filter written
// otherwise is a *FilterSyntaxError.
func ParseFilters(where []string) ([]Filter, error) {
	var out []Filter
	for _, w := range where {
		field, value, ok := strings.Cut(w, "=")
		field = strings.TrimSpace(field)
		if !ok || field == "" {
			return nil, &FilterSyntaxError{Filter: w}
		}
		out = append(out, Filter{Field: field, Value: strings.TrimSpace(value)})
	}
	return out, nil
}

// match says whether the item passes every filter.
func match(filters []Filter, label string, groups, fields map[string]string) bool {
	for _, f := range filters {
		var v string
		switch {
		case f.Field == "label":
			v = label
		case groups[f.Field] != "":
			v = groups[f.Field]
		default:
			v = fieldValue(fields, f.Field)
		}
		if strings.TrimSpace(v) != f.Value {
			return false
		}
	}
	return true
}

// fieldValue is fields[name], or the value of the smallest key equal to
// name ignoring case.
func fieldValue(fields map[string]string, name string) string {
	if v, ok := fields[name]; ok {
		return v
	}
	match, v := "", ""
	for k, fv := range fields {
		if strings.EqualFold(k, name) && (match == "" || k < match) {
			match, v = k, fv
		}
	}
	return v
}

// LoadOptions choose what Load reads beyond the run records.
type LoadOptions struct {
	// By are the pivot's group fields; nil means no pivot (Data.Pivot nil).
	By []string
	// Window restricts the pivot and the readers' period.
	Window Window
	// Where keeps only the matching items in every section that counts
	// items: the item counts, the labels and group tables, the cube and
	// pivot, and the dead letters. A filter on a field no item has is an
	// *UnknownFieldError.
	Where []Filter
	// Now stamps Data.Generated; nil means time.Now.
	Now func() time.Time
}

// Load reads everything a report shows: the counts, the stored aggregate,
// dead letters by reason, the recent runs and the last run's samples, and
// the cube of done items (streamed once; its memory grows with the number
// of group-value combinations, not items), from which it computes the
// pivot when o.By is set.
func Load(db pipeline.Database, o LoadOptions) (*Data, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	d := &Data{DB: db.Path(), Generated: now(), Window: o.Window}
	for _, s := range db.Stages() {
		d.Stages = append(d.Stages, s.Name)
	}
	var err error
	if d.Counts, err = db.Counts(); err != nil {
		return nil, err
	}
	if d.Tally, err = db.Tally(); err != nil {
		return nil, err
	}
	if d.Dead, err = deadReasons(db, d.Stages); err != nil {
		return nil, err
	}
	if err := d.loadRuns(db); err != nil {
		return nil, err
	}
	if err := d.loadFigures(db, o); err != nil {
		return nil, err
	}
	return d, nil
}

// deadReasons groups each stage's dead letters by reason, most frequent
// first, with a few of their ids.
func deadReasons(db pipeline.Database, stageList []string) (map[string][]DeadReason, error) {
	dead := map[string][]DeadReason{}
	for _, s := range stageList {
		byReason := map[string]*DeadReason{}
		err := db.ForEachDead(s, func(e pipeline.DeadEntry) error {
			key := pipeline.ReasonKey(pipeline.DeadLetter{Class: e.Dead.Class, Message: e.Dead.Message})
			r := byReason[key]
			if r == nil {
				r = &DeadReason{Reason: key}
				byReason[key] = r
			}
			r.Count++
			if len(r.IDs) < 3 {
				r.IDs = append(r.IDs, e.ID)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, r := range byReason {
			dead[s] = append(dead[s], *r)
		}
		slices.SortFunc(dead[s], func(a, b DeadReason) int {
			if a.Count != b.Count {
				return b.Count - a.Count
			}
			return strings.Compare(a.Reason, b.Reason)
		})
	}
	return dead, nil
}

// loadRuns reads the last runs, what killed ones cost, the batch jobs and
// the last run's samples.
func (d *Data) loadRuns(db pipeline.Database) error {
	var err error
	if d.Runs, err = db.Runs(20); err != nil {
		return err
	}
	defs, err := db.StoredDefinition()
	if err != nil {
		return &RecordError{What: "read the recorded pipeline definition", Err: err}
	}
	var own map[string]stages.PriceConfig
	if jdb, ok := db.(interface{ Job() ([]byte, error) }); ok {
		raw, err := jdb.Job()
		if err != nil {
			return &RecordError{What: "read the stored job", Err: err}
		}
		own = job.StoredPrices(raw, db.Path())
	}
	d.KilledCosts = priceKilledRuns(d.Runs, defs, own)
	if d.Batch, err = loadBatch(db); err != nil {
		return err
	}
	if len(d.Runs) > 0 {
		d.LastRun = &d.Runs[0]
		if d.Samples, err = db.Samples(d.LastRun.ID); err != nil {
			return err
		}
	}
	return nil
}

// loadFigures reads the cube (the stored one when it answers, else from
// one pass over the done items), applies o.Where to every figure that
// counts items, stamps each period and builds the pivot.
func (d *Data) loadFigures(db pipeline.Database, o LoadOptions) error {
	agg, err := storedAggregate(db)
	if err != nil {
		return err
	}
	groupBy := agg.GroupBy
	if groupBy == nil {
		groupBy = stages.DefaultGroupBy
	}
	dims := slices.Clone(o.By)
	for _, g := range groupBy {
		if !slices.Contains(dims, g) {
			dims = append(dims, g)
		}
	}
	if len(o.Where) > 0 {
		// Filtered figures come from one pass over the items: the
		// stored cube and tally hold no ids (see storedCube).
		f, err := loadFiltered(db, agg, dims, o.Where, groupBy)
		if err != nil {
			return err
		}
		if err := checkFilterFields(o.Where, f.cube.Dims, f.places.fields, f.places.read); err != nil {
			return err
		}
		d.Cube, d.Where, d.Tally, d.Counts, d.Dead = f.cube, f.cube.Where, f.tally, f.places.counts, f.places.sortedReasons()
	} else {
		var t pipeline.Tally
		var counts pipeline.Counts
		if d.Cube, t, counts, err = storedCube(db, dims, d.Tally, d.Counts); err != nil {
			return err
		}
		if d.Cube != nil {
			d.Tally, d.Counts = t, counts // the state the cube was read in
		} else if d.Cube, err = loadCube(db, agg, dims, nil); err != nil {
			// The store's cube cannot answer (see storedCube): one
			// pass over every done item.
			return err
		}
	}
	d.Periods = periodStamps(d.Cube, append(slices.Clone(groupBy), MonthField), o.Window, d.Cube.Where)
	if err := compareStamps(db, d.Periods); err != nil {
		return err
	}
	if o.By != nil {
		if d.Pivot, err = d.Cube.Pivot(PivotOptions{By: o.By, Window: o.Window}); err != nil {
			return err
		}
	}
	return nil
}

// storedAggregate is the aggregate configuration the last run recorded
// (in the flags' form or a job file's), or the defaults for a database from before it was recorded.
func storedAggregate(db pipeline.Database) (*stages.Aggregate, error) {
	agg := &stages.Aggregate{}
	defs, err := db.StoredDefinition()
	if err != nil {
		return nil, fmt.Errorf("read the recorded pipeline definition: %w", err)
	}
	for _, d := range defs {
		if d.Name == agg.Name() && len(d.Config) > 0 {
			// A job records the stage in the job file's form.
			if a, ok := job.RecordedAggregate(d.Config); ok {
				*agg = a
				continue
			}
			if err := json.Unmarshal(d.Config, agg); err != nil {
				return nil, &RecordError{What: "read the recorded aggregate configuration", Err: err}
			}
		}
	}
	return agg, nil
}

// LoadCube returns the cube keyed by dims of the done items: its label
// and confidence from the classify output, and its group values and
// rating as agg computes them (so "month" comes from agg's date field).
// Items failing a filter are left out. It reads the store's cube when
// that answers exactly (no filter, dims the aggregate's group fields),
// else streams the done items once; an item whose classify output cannot
// be read is then an error naming it.
func LoadCube(db pipeline.Database, agg *stages.Aggregate, dims []string, where []Filter) (*Cube, error) {
	if len(where) == 0 {
		t, err := db.Tally()
		if err != nil {
			return nil, err
		}
		counts, err := db.Counts()
		if err != nil {
			return nil, err
		}
		if c, _, _, err := storedCube(db, dims, t, counts); c != nil || err != nil {
			return c, err
		}
	}
	return loadCube(db, agg, dims, where)
}

// cubePass folds done items into a cube keyed by its dims, and with
// filters the matching ones into a tally grouped by groupBy, as the
// stored aggregate folds them.
type cubePass struct {
	cube    *Cube
	facts   stages.Aggregate
	where   []Filter
	groupBy []string
	tally   pipeline.Tally
}

func newCubePass(agg *stages.Aggregate, dims []string, where []Filter, groupBy []string) *cubePass {
	p := &cubePass{cube: NewCube(dims), facts: *agg, where: where, groupBy: groupBy}
	p.facts.GroupBy = p.cube.Dims
	for _, f := range where {
		p.cube.Where = append(p.cube.Where, f.String())
	}
	return p
}

// add folds done item it in when it passes the filters, and returns its
// fact, grouped by the cube's dims; an item whose classify output cannot
// be read is an error naming it.
func (p *cubePass) add(it pipeline.Item) (pipeline.Fact, error) {
	f, err := p.facts.Fact(it)
	if err != nil {
		return f, &RecordError{What: "report", Err: err}
	}
	if !match(p.where, f.Label, f.Groups, it.Fields) {
		return f, nil
	}
	if len(p.where) > 0 {
		p.tally.Fold(it.ID, tallyFact(f, p.groupBy), +1)
	}
	var out struct {
		Confidence float64 `json:"confidence"`
	}
	_ = json.Unmarshal(it.Outputs["classify"], &out) // Fact has checked it is an object
	p.cube.Add(Review{ID: it.ID, Label: f.Label, Confidence: out.Confidence, Rating: f.Rating, Groups: f.Groups, Text: it.Text})
	return f, nil
}

// loadCube is LoadCube's pass over the done items.
func loadCube(db pipeline.Database, agg *stages.Aggregate, dims []string, where []Filter) (*Cube, error) {
	p := newCubePass(agg, dims, where, nil)
	err := db.ForEachDone(func(it pipeline.Item) error {
		_, err := p.add(it)
		return err
	})
	if err != nil {
		return nil, err
	}
	p.cube.Sort()
	return p.cube, nil
}

// filtered is what Load shows with filters, from one pass over the
// items: the cube and the tally of the matching done items, and where
// every matching item stands.
type filtered struct {
	cube   *Cube
	tally  pipeline.Tally
	places *placeCount
}

// loadFiltered reads every item once (on a store that cannot walk its
// items, the done items once and then the dead letters): the done ones
// into the cube and the tally, and each item that passes where into the
// counts of where it stands.
func loadFiltered(db pipeline.Database, agg *stages.Aggregate, dims []string, where []Filter, groupBy []string) (*filtered, error) {
	var names []string
	for _, s := range db.Stages() {
		names = append(names, s.Name)
	}
	cp := newCubePass(agg, dims, where, groupBy)
	pc := newPlaceCount(names, agg, where)
	done := func(it pipeline.Item) error {
		f, err := cp.add(it)
		if err != nil {
			return err
		}
		// Placed by its fact as the aggregate groups it: what
		// itemFacts gives a done item, without decoding it again.
		pc.count(it, pipeline.StatusDone, "", nil, f.Label, tallyFact(f, groupBy).Groups)
		return nil
	}
	if err := walkItems(db, names, done, pc.place); err != nil {
		return nil, err
	}
	cp.cube.Sort()
	return &filtered{cube: cp.cube, tally: cp.tally, places: pc}, nil
}

// MissingFields lists the fields of by that no item of a non-empty cube
// has: grouped by, every row would read "unknown", most likely because
// the field's name is misspelt. The caller warns; the report still runs.
func MissingFields(c *Cube, by []string) []string {
	if c == nil || len(c.Cells) == 0 {
		return nil
	}
	var missing []string
	for _, f := range by {
		i := slices.Index(c.Dims, f)
		if i < 0 {
			continue
		}
		if !slices.ContainsFunc(c.Cells, func(cell *CubeCell) bool { return cell.Key[i] != unknown }) {
			missing = append(missing, f)
		}
	}
	return missing
}
