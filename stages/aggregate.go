package stages

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/dates"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Aggregate defaults and group values.
const (
	// DefaultDateField is the record field the "month" group is derived from.
	DefaultDateField = "date"
	// DefaultRatingField is the record field holding the star rating.
	DefaultRatingField = "rating"
	// MonthGroup is the group name derived from the date field ("2006-01").
	MonthGroup = "month"
	// Unknown is the group value of a missing field or an unparsable date.
	Unknown = "unknown"
)

// DefaultGroupBy is the grouping used when Aggregate.GroupBy is nil.
// Treat it as read-only.
var DefaultGroupBy = []string{"app", MonthGroup}

// Aggregate is the last stage: it turns a classified item into a
// pipeline.Fact (label, group values, rating) for the store to fold into
// the run's tally. The zero value uses the defaults. It is pure and safe
// for concurrent use.
type Aggregate struct {
	// GroupBy lists the record fields to group by. "month" is derived from
	// DateField. nil means DefaultGroupBy; an empty, non-nil slice groups
	// by nothing (counts by label only).
	GroupBy []string
	// DateField is the field "month" comes from; "" means DefaultDateField.
	DateField string
	// RatingField is the field holding a numeric rating; "" means
	// DefaultRatingField. A missing or non-numeric rating is left out.
	RatingField string
	// Count is the output field counted as the fact's label, written
	// STAGE.FIELD (extract.severity); "" means the classify label. An
	// item the stage skipped counts as "skipped", a missing or empty
	// field as Unknown, a non-string value as its JSON.
	Count string
}

var _ pipeline.Stage = (*Aggregate)(nil)

// Name returns "aggregate".
func (a *Aggregate) Name() string { return "aggregate" }

// Process returns the item's Fact as JSON.
func (a *Aggregate) Process(_ context.Context, it pipeline.Item) (pipeline.Result, error) {
	f, err := a.Fact(it)
	if err != nil {
		return pipeline.Result{}, err
	}
	b, err := json.Marshal(f)
	if err != nil {
		return pipeline.Result{}, fmt.Errorf("aggregate: encode fact: %w", err)
	}
	return pipeline.Result{Output: b}, nil
}

// Fact computes what the item contributes to the tally: the label of its
// classify output (it.Outputs["classify"], else it.Prev, so a custom stage
// may sit between classify and aggregate), one value per
// GroupBy field ("unknown" when missing; "month" as "2006-01" from
// DateField) and the rating when RatingField holds a number. A missing or
// unusable classify output is a permanent error. Fact is deterministic, so
// a check can recompute the tally from stored outputs and must agree.
func (a *Aggregate) Fact(it pipeline.Item) (pipeline.Fact, error) {
	if a.Count != "" {
		label, err := a.countValue(it)
		if err != nil {
			return pipeline.Fact{}, err
		}
		return a.fact(it, label, a.Count)
	}
	raw := it.Outputs["classify"]
	if len(raw) == 0 {
		raw = it.Prev
	}
	const hint = "re-run the item through classify"
	if len(raw) == 0 {
		return pipeline.Fact{}, pipeline.Permanentf("aggregate: item %s has no classify output: %s", itemRef(it), hint)
	}
	var out struct {
		Label string `json:"label"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return pipeline.Fact{}, pipeline.Permanentf("aggregate: item %s: classify output is not a JSON object (%v): %s", itemRef(it), err, hint)
	}
	label := strings.TrimSpace(out.Label)
	if label == "" {
		return pipeline.Fact{}, pipeline.Permanentf("aggregate: item %s: classify output has no label: %s", itemRef(it), hint)
	}
	return a.fact(it, label, "classify label")
}

// maxFactValue is the most bytes a counted label or a group's value may
// hold. The tally keys its counts by them: bbolt refuses a key over 32
// KiB and PostgreSQL an index entry over about 2.7 KB (a label and a
// group's value share one), so a longer value failed the commit that
// held it, with the store's bare "key too large", and every commit that
// retried the item after it. No category worth counting is that long:
// it is a free-text field counted by mistake, or a damaged input column.
const maxFactValue = 1000

// fact is the item's Fact once its label (read from what) is known, or
// a permanent error naming the item when the label or a group's value
// is too long to count (maxFactValue).
func (a *Aggregate) fact(it pipeline.Item, label, what string) (pipeline.Fact, error) {
	if len(label) > maxFactValue {
		return pipeline.Fact{}, pipeline.Permanentf("aggregate: item %s: its %s is %d bytes, more than the %d a tally counts by: count a field of a few words (the job's count:, or the classify schema's labels), then re-run the item from the stage that wrote it",
			itemRef(it), what, len(label), maxFactValue)
	}
	f := pipeline.Fact{Label: label}
	groupBy := a.GroupBy
	if groupBy == nil {
		groupBy = DefaultGroupBy
	}
	if len(groupBy) > 0 {
		f.Groups = make(map[string]string, len(groupBy))
	}
	for _, g := range groupBy {
		if g == MonthGroup {
			f.Groups[g] = a.month(it.Fields)
			continue
		}
		v, ok := field(it.Fields, g)
		if !ok {
			v = Unknown
		}
		if len(v) > maxFactValue {
			return pipeline.Fact{}, pipeline.Permanentf("aggregate: item %s: its %q field is %d bytes, more than the %d a tally groups by: shorten it in the input file and run again (the edited row re-enters by itself)",
				itemRef(it), g, len(v), maxFactValue)
		}
		f.Groups[g] = v
	}
	if v, ok := field(it.Fields, orDefault(a.RatingField, DefaultRatingField)); ok {
		if r, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(r) && !math.IsInf(r, 0) {
			f.Rating = &r
		}
	}
	return f, nil
}

// countValue reads the Count field of the item's outputs.
func (a *Aggregate) countValue(it pipeline.Item) (string, error) {
	stage, name, _ := strings.Cut(a.Count, ".")
	raw := it.Outputs[stage]
	if len(raw) == 0 {
		return "", pipeline.Permanentf("aggregate: item %s has no %s output to count %s: re-run the item through %s", itemRef(it), stage, a.Count, stage)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", pipeline.Permanentf("aggregate: item %s: %s output is not a JSON object (%v)", itemRef(it), stage, err)
	}
	if string(out["skipped"]) == "true" {
		return "skipped", nil
	}
	v := out[name]
	var str string
	switch {
	case len(v) == 0 || string(v) == "null":
		return Unknown, nil
	case json.Unmarshal(v, &str) == nil:
		if str = strings.TrimSpace(str); str == "" {
			return Unknown, nil
		}
		return str, nil
	default:
		return string(v), nil
	}
}

// month derives the month group from the date field, falling back to a
// "month" field that already holds one.
func (a *Aggregate) month(fields map[string]string) string {
	if v, ok := field(fields, orDefault(a.DateField, DefaultDateField)); ok {
		if m := MonthOf(v); m != Unknown {
			return m
		}
	}
	if v, ok := field(fields, MonthGroup); ok {
		if t, err := time.Parse("2006-01", v); err == nil {
			return t.Format("2006-01")
		}
	}
	return Unknown
}

// field returns the trimmed, non-empty value of fields[name], matching the
// name exactly or else ignoring case (CSV headers are often capitalised).
// Among several case-insensitive matches the smallest key wins, so the
// result never depends on map order.
func field(fields map[string]string, name string) (string, bool) {
	v, ok := fields[name]
	if !ok {
		match := ""
		for k, fv := range fields {
			if strings.EqualFold(k, name) && (!ok || k < match) {
				match, v, ok = k, fv, true
			}
		}
	}
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// MonthOf returns the month ("2006-01") of a date in any layout package
// dates reads (RFC 3339, 2006-01-02, 01/02/2006, 02.01.2006, Jan 2, 2006,
// 20060102, Unix seconds or milliseconds, ...), or Unknown. A timestamp's
// month is the one written in its own offset, as a person reading the row
// would see it; unix times are read in UTC. Ingest has already rewritten a
// file's ambiguous day/month dates as 2006-01-02, in the order it decided
// for that file.
func MonthOf(date string) string {
	if m := dates.Month(date); m != "" {
		return m
	}
	return Unknown
}
