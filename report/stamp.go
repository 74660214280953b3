// This file fingerprints the figures of each month a report shows, so a
// report can say when a month's figures changed since the last report of
// that month (an item edited, re-run or added after it).

package report

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// PeriodStamp is the fingerprint of one month's figures and what the
// database recorded of the last report of that month.
type PeriodStamp struct {
	// Period names the month and the --where filters ("2026-11", or
	// "2026-11 where app=TaskFlow"): a filtered report has its own stamps.
	Period string `json:"period"`
	// Month is the month, 2006-01.
	Month string `json:"month"`
	// Fingerprint is a hash of the month's figures: the label counts and
	// rating sums of every combination of the aggregate's group values.
	// It does not depend on --by, quotes or the order items were read in.
	Fingerprint string `json:"fingerprint"`
	// LastReport is when a report of this period was last generated;
	// zero when none was recorded.
	LastReport time.Time `json:"last_report,omitzero"`
	// Changed says the figures differ from those of that report.
	Changed bool `json:"changed_since_last_report,omitempty"`
}

// periodStamps fingerprints every month of c inside w (every month when
// w is zero), the cells projected onto dims (the aggregate's group fields
// and month) so that a cube with more dims gives the same fingerprints.
func periodStamps(c *Cube, dims []string, w Window, where []string) []PeriodStamp {
	if c == nil {
		return nil
	}
	dims = slices.Clone(dims)
	if !slices.Contains(dims, MonthField) {
		dims = append(dims, MonthField)
	}
	slices.Sort(dims)
	dims = slices.Compact(dims)
	pos := make([]int, 0, len(dims))
	for _, d := range dims {
		if i := slices.Index(c.Dims, d); i >= 0 {
			pos = append(pos, i)
		}
	}
	month := slices.Index(c.Dims, MonthField)
	type figures struct {
		count, ratingCount int64
		ratingSum          float64
	}
	// months -> projected cell key -> label -> figures
	byMonth := map[string]map[string]map[string]*figures{}
	for _, cell := range c.Cells {
		m := cell.Key[month]
		if !isMonth(m) || !w.Contains(m) {
			continue
		}
		vals := make([]string, len(pos))
		for i, p := range pos {
			vals[i] = cell.Key[p]
		}
		key := cellKey(vals)
		if byMonth[m] == nil {
			byMonth[m] = map[string]map[string]*figures{}
		}
		cells := byMonth[m]
		if cells[key] == nil {
			cells[key] = map[string]*figures{}
		}
		for label, ls := range cell.Labels {
			f := cells[key][label]
			if f == nil {
				f = &figures{}
				cells[key][label] = f
			}
			f.count += ls.Count
			f.ratingCount += ls.RatingCount
			f.ratingSum += ls.RatingSum
		}
	}
	filter := ""
	if len(where) > 0 {
		ws := slices.Clone(where)
		slices.Sort(ws)
		filter = " where " + strings.Join(ws, ", ")
	}
	var out []PeriodStamp
	for _, m := range sortedKeys(byMonth) {
		h := sha256.New()
		fmt.Fprintf(h, "%q\n", dims)
		cells := byMonth[m]
		for _, key := range sortedKeys(cells) {
			for _, label := range sortedKeys(cells[key]) {
				f := cells[key][label]
				// Rating sums are rounded: summing the same ratings in
				// another grouping must not read as a change.
				fmt.Fprintf(h, "%q %q %d %d %.6f\n", key, label, f.count, f.ratingCount, math.Round(f.ratingSum*1e6)/1e6)
			}
		}
		out = append(out, PeriodStamp{Period: m + filter, Month: m, Fingerprint: hex.EncodeToString(h.Sum(nil)[:12])})
	}
	return out
}

// compareStamps fills each stamp's LastReport and Changed from what the
// database recorded of the last report of its period.
// reportFingerprints is a store that keeps the fingerprint of the last
// report of each period (bbolt).
type reportFingerprints interface {
	ReportFingerprint(period string) (pipeline.ReportStamp, bool, error)
}

func compareStamps(db pipeline.Database, stamps []PeriodStamp) error {
	fp, ok := db.(reportFingerprints)
	if !ok {
		return nil // a store without stored fingerprints (PostgreSQL): nothing to compare
	}
	for i := range stamps {
		prev, ok, err := fp.ReportFingerprint(stamps[i].Period)
		if err != nil {
			return err
		}
		if ok {
			stamps[i].LastReport = prev.At
			stamps[i].Changed = prev.Fingerprint != stamps[i].Fingerprint
		}
	}
	return nil
}

// ChangeNotes says, for each month whose figures changed since the last
// report of it, "figures for 2026-11 changed since the report of
// 2026-11-30 14:05 UTC". Empty when nothing changed or nothing was
// reported before.
func (d *Data) ChangeNotes() []string {
	var notes []string
	for _, s := range d.Periods {
		if !s.Changed {
			continue
		}
		notes = append(notes, fmt.Sprintf("figures for %s changed since the report of %s", s.Period, s.LastReport.In(d.zone()).Format("2006-01-02 15:04 MST")))
	}
	return notes
}

// Stamps is what a caller records after rendering d: each period's
// fingerprint, stamped with d.Generated.
func (d *Data) Stamps() map[string]pipeline.ReportStamp {
	if len(d.Periods) == 0 {
		return nil
	}
	out := make(map[string]pipeline.ReportStamp, len(d.Periods))
	for _, s := range d.Periods {
		out[s.Period] = pipeline.ReportStamp{Fingerprint: s.Fingerprint, At: d.Generated.UTC()}
	}
	return out
}
