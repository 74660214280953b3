package ingest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/dates"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// monthGroup is the group-by name the aggregate stage derives from the
// date field (stages.MonthGroup).
const monthGroup = "month"

// unusableShare is the share of rows, in percent, whose date or rating
// may fail to read before a warning: a few odd rows are normal, more is a
// wrong field or layout.
const unusableShare = 5

// fieldCheck checks the fields the aggregate stage reads (group-by, date,
// rating) on every good record: it rejects ratings that would break the
// tally, rewrites dates in the file's own layouts as 2006-01-02, and counts
// what is missing or unreadable, for Warnings.
type fieldCheck struct {
	groupBy     []string // without the derived "month"
	dateField   string   // "" when no group needs a date
	dateFormat  string
	order       dates.Order
	ratingField string
	min, max    float64
	optional    []string
	names       Names

	rows     int
	absent   map[string]*sample // by field name: rows without a value
	evidence dates.Evidence
	dated    int // rows with a date value
	badDates sample
	rated    int // rows with a rating value
	badRates sample
}

// sample counts rows and keeps three examples.
type sample struct {
	n        int
	examples []string
}

func (s *sample) add(example string) {
	s.n++
	if len(s.examples) < 3 {
		s.examples = append(s.examples, example)
	}
}

func newFieldCheck(opt Options) fieldCheck {
	fc := fieldCheck{ratingField: opt.RatingField, min: opt.ratingMin, max: opt.ratingMax, dateFormat: opt.DateFormat, order: opt.dateOrder,
		optional: opt.OptionalFields, absent: map[string]*sample{}, names: opt.Names.withDefaults()}
	for _, g := range opt.GroupBy {
		if g == monthGroup {
			fc.dateField = opt.DateField
			continue
		}
		fc.groupBy = append(fc.groupBy, g)
	}
	if opt.DateFormat != "" {
		fc.dateField = opt.DateField
	}
	return fc
}

// check returns why rec cannot be kept, or "": a rating that is not a
// finite number in range would make the tally's sums wrong.
func (fc *fieldCheck) check(rec *pipeline.Record) string {
	key, v, ok := lookup(rec.Fields, fc.ratingField)
	if !ok {
		return ""
	}
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return "" // not a number: the aggregate leaves it out; counted in count
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return fmt.Sprintf("rating %q = %.40q is not a finite number: fix it, or empty the field", key, v)
	case f < fc.min || f > fc.max:
		return fmt.Sprintf("rating %q = %.40q is outside the range %s: fix it, or %s if your ratings use another scale", key, v, formatRange(fc.min, fc.max), fc.names.set(fc.names.RatingRange))
	}
	return ""
}

// count records what rec holds of the fields in use, and rewrites its date
// as 2006-01-02 (or RFC 3339) when it is written in a layout whose reading
// depends on this file: a day/month order, a month name or Options.DateFormat.
func (fc *fieldCheck) count(rec *pipeline.Record) {
	fc.rows++
	for _, g := range fc.groupBy {
		if _, _, ok := lookup(rec.Fields, g); !ok {
			fc.absentSample(g).add(fmt.Sprintf("line %d", rec.Line))
		}
	}
	if _, v, ok := lookup(rec.Fields, fc.ratingField); ok {
		fc.rated++
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			fc.badRates.add(fmt.Sprintf("line %d: %.40q", rec.Line, v))
		}
	} else {
		fc.absentSample(fc.ratingField).add(fmt.Sprintf("line %d", rec.Line))
	}
	if fc.dateField == "" {
		return
	}
	key, v, ok := lookup(rec.Fields, fc.dateField)
	if !ok {
		fc.absentSample(fc.dateField).add(fmt.Sprintf("line %d", rec.Line))
		return
	}
	fc.dated++
	fc.evidence.Add(v)
	d, ok := dates.Parse(v, fc.order, fc.dateFormat)
	switch {
	case !ok:
		fc.badDates.add(fmt.Sprintf("line %d: %.40q", rec.Line, v))
	case d.Kind != dates.Canonical:
		rec.Fields[key] = d.ISO()
	}
}

func (fc *fieldCheck) absentSample(field string) *sample {
	s := fc.absent[field]
	if s == nil {
		s = &sample{}
		fc.absent[field] = s
	}
	return s
}

// warnings says which fields in use most rows lack, and whether more than
// unusableShare percent of dates or ratings could not be read; each with
// counts and three examples.
func (fc *fieldCheck) warnings() []string {
	if fc.rows == 0 {
		return nil
	}
	var out []string
	missing := func(flag, field, effect string) {
		s := fc.absent[field]
		if s == nil || s.n*2 <= fc.rows || (s.n == fc.rows && slices.Contains(fc.optional, field)) {
			return
		}
		out = append(out, fmt.Sprintf("%s %q: no value in %d of %d rows (e.g. %s): %s; check the field's name (names match ignoring case)",
			flag, field, s.n, fc.rows, strings.Join(s.examples, ", "), effect))
	}
	for _, g := range fc.groupBy {
		missing(fc.names.GroupBy, g, `those rows count as "unknown"`)
	}
	if fc.dateField != "" {
		missing(fc.names.DateField, fc.dateField, `their month is "unknown"`)
	}
	missing(fc.names.RatingField, fc.ratingField, "they have no rating")
	if fc.badDates.n*100 > fc.dated*unusableShare {
		out = append(out, fmt.Sprintf("%s %q: %d of %d dates could not be read (e.g. %s): their month is \"unknown\"; %s with a Go layout (e.g. \"02/01/2006 15:04\") if they share one",
			fc.names.DateField, fc.dateField, fc.badDates.n, fc.dated, strings.Join(fc.badDates.examples, ", "), fc.names.set(fc.names.DateFormat)))
	}
	if fc.badRates.n*100 > fc.rated*unusableShare {
		out = append(out, fmt.Sprintf("%s %q: %d of %d ratings are not numbers (e.g. %s): they are left out of the average rating",
			fc.names.RatingField, fc.ratingField, fc.badRates.n, fc.rated, strings.Join(fc.badRates.examples, ", ")))
	}
	return out
}

// lookup returns the key fields[name] was found under and its trimmed,
// non-empty value, matching the name exactly or else ignoring case, as
// the aggregate stage does (the smallest matching key wins).
func lookup(fields map[string]string, name string) (string, string, bool) {
	if name == "" {
		return "", "", false
	}
	key := name
	v, ok := fields[name]
	if !ok {
		for k, fv := range fields {
			if strings.EqualFold(k, name) && (!ok || k < key) {
				key, v, ok = k, fv, true
			}
		}
	}
	v = strings.TrimSpace(v)
	return key, v, ok && v != ""
}

// ParseRatingRange reads "MIN-MAX" (or "MIN:MAX"), e.g. "0-10" or "1:5".
func ParseRatingRange(s string) (min, max float64, err error) {
	s = strings.TrimSpace(s)
	for i := 1; i < len(s); i++ {
		if (s[i] != '-' && s[i] != ':') || !(s[i-1] >= '0' && s[i-1] <= '9' || s[i-1] == '.' || s[i-1] == ' ') {
			continue
		}
		lo, err1 := strconv.ParseFloat(strings.TrimSpace(s[:i]), 64)
		hi, err2 := strconv.ParseFloat(strings.TrimSpace(s[i+1:]), 64)
		if err1 != nil || err2 != nil || math.IsInf(lo, 0) || math.IsInf(hi, 0) || math.IsNaN(lo) || math.IsNaN(hi) || lo > hi {
			break
		}
		return lo, hi, nil
	}
	return 0, 0, fmt.Errorf("rating range %q cannot be read: write it as MIN-MAX with MIN <= MAX, e.g. 0-10 or 1-5", s)
}

func formatRange(min, max float64) string {
	return strconv.FormatFloat(min, 'g', -1, 64) + "-" + strconv.FormatFloat(max, 'g', -1, 64)
}
