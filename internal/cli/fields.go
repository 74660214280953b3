package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// fieldCheck watches the records of an input for the fields the
// aggregate reads (--group-by, --date-field, --rating-field), so that a
// misnamed field or dates in a layout the aggregate cannot read are
// reported after the ingest instead of silently counting as "unknown".
type fieldCheck struct {
	groupBy     []string
	dateField   string
	ratingField string
	// given says which of the three flags the user gave: a default field
	// absent from every row is data the input does not have, not a typo.
	given map[string]bool

	rows    int
	missing map[string]int // field -> rows without it
	seen    map[string]int // field names present, for suggestions
	badDate []string       // values that are no date MonthOf reads (first 3)
	nBad    int
	nDates  int
	badRate []string // ratings that are no number (first 3)
	nBadR   int
	nRates  int
}

// newFieldCheck checks the fields o's aggregate reads.
func newFieldCheck(o *pipelineOptions) *fieldCheck {
	fc := &fieldCheck{dateField: o.DateField, ratingField: o.RatingField, missing: map[string]int{}, seen: map[string]int{},
		given: map[string]bool{"--group-by": o.set["group-by"], "--date-field": o.set["date-field"], "--rating-field": o.set["rating-field"]}}
	for _, g := range o.GroupBy {
		if g != stages.MonthGroup {
			fc.groupBy = append(fc.groupBy, g)
		}
	}
	return fc
}

// lookup is fields[name], matching case-insensitively as the aggregate
// does, and whether it holds a non-blank value.
func lookup(fields map[string]string, name string) (string, bool) {
	if v, ok := fields[name]; ok {
		v = strings.TrimSpace(v)
		return v, v != ""
	}
	for k, v := range fields {
		if strings.EqualFold(k, name) {
			v = strings.TrimSpace(v)
			return v, v != ""
		}
	}
	return "", false
}

// add looks at one record.
func (fc *fieldCheck) add(r pipeline.Record) {
	fc.rows++
	for k := range r.Fields {
		if len(fc.seen) < 200 {
			fc.seen[k]++
		}
	}
	for _, g := range fc.groupBy {
		if _, ok := lookup(r.Fields, g); !ok {
			fc.missing[g]++
		}
	}
	if v, ok := lookup(r.Fields, fc.dateField); ok {
		fc.nDates++
		if stages.MonthOf(v) == stages.Unknown {
			fc.nBad++
			if len(fc.badDate) < 3 {
				fc.badDate = append(fc.badDate, v)
			}
		}
	} else {
		fc.missing[fc.dateField]++
	}
	if v, ok := lookup(r.Fields, fc.ratingField); ok {
		fc.nRates++
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			fc.nBadR++
			if len(fc.badRate) < 3 {
				fc.badRate = append(fc.badRate, v)
			}
		}
	} else {
		fc.missing[fc.ratingField]++
	}
}

// report warns, with counts and examples, about a field absent from most
// rows (a default one only when some rows have it), dates unreadable in more than 5% of the rows that have one, and
// ratings that are not numbers in more than 5%.
func (fc *fieldCheck) report(w io.Writer, path string) {
	if fc.rows == 0 {
		return
	}
	var present []string
	for k := range fc.seen {
		present = append(present, k)
	}
	sort.Strings(present)
	fieldsHint := ""
	if len(present) > 0 {
		shown := present[:min(len(present), 8)]
		fieldsHint = " (the rows have: " + strings.Join(shown, ", ")
		if len(present) > len(shown) {
			fieldsHint += ", ..."
		}
		fieldsHint += ")"
	}
	warnMissing := func(flag, name, effect string) {
		if n := fc.missing[name]; n*2 > fc.rows && (fc.given[flag] || n < fc.rows) {
			fmt.Fprintf(w, "warning: input %s: %s %s is absent from %d of %d rows%s%s; %s\n",
				path, flag, name, n, fc.rows, didYouMean(name, present, "%q"), fieldsHint, effect)
		}
	}
	for _, g := range fc.groupBy {
		warnMissing("--group-by", g, "those rows count under "+strconv.Quote(stages.Unknown))
	}
	warnMissing("--date-field", fc.dateField, "their month counts as "+strconv.Quote(stages.Unknown))
	warnMissing("--rating-field", fc.ratingField, "they have no rating in the averages")
	if fc.nDates > 0 && fc.nBad*20 > fc.nDates {
		fmt.Fprintf(w, "warning: input %s: %d of %d --date-field %s values are no date sawtooth reads (e.g. %s): their month counts as %q; "+
			"write them as 2006-01-02, RFC 3339 or Unix seconds\n", path, fc.nBad, fc.nDates, fc.dateField, quoteAll(fc.badDate), stages.Unknown)
	}
	if fc.nRates > 0 && fc.nBadR*20 > fc.nRates {
		fmt.Fprintf(w, "warning: input %s: %d of %d --rating-field %s values are not numbers (e.g. %s): they are left out of the averages\n",
			path, fc.nBadR, fc.nRates, fc.ratingField, quoteAll(fc.badRate))
	}
}

// quoteAll is the values quoted and comma-separated, terminal-safe.
func quoteAll(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}
