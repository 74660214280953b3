package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The view models below are computed from Data once and shared by the
// text, Markdown and HTML renderers, so the three always agree.

// stageRow is one stage's accounting in a run.
type stageRow struct {
	Name string
	pipeline.StageStats
	// Cost is CostUSD for display, "unpriced" when its tokens have no price.
	Cost string
}

// stageRows are r's stages in order; unpriced names those whose tokens
// have no price (Data.unpricedStages).
func stageRows(r *pipeline.RunSummary, order []string, unpriced map[string]bool) []stageRow {
	if r == nil {
		return nil
	}
	var rows []stageRow
	seen := map[string]bool{}
	for _, name := range append(slices.Clone(order), sortedKeys(r.Stages)...) {
		s := r.Stages[name]
		if s == nil || seen[name] {
			continue
		}
		seen[name] = true
		rows = append(rows, stageRow{Name: name, StageStats: *s, Cost: costText(s.CostUSD, unpriced[name])})
	}
	return rows
}

// labelRow is one label of the aggregate.
type labelRow struct {
	Label    string
	Items    int64
	Share    float64 // of all aggregated items, 0..1
	Rating   float64
	HasMean  bool
	Examples []string
}

func labelRows(d *Data) []labelRow {
	var rows []labelRow
	for _, l := range d.labelsByCount() {
		n := d.Tally.Labels[l]
		row := labelRow{Label: l, Items: n, Share: float64(n) / float64(max(d.Tally.Items, 1)), Examples: d.Tally.Examples[l]}
		if r, ok := d.Tally.Ratings[l]; ok && r.Count > 0 {
			row.Rating, row.HasMean = r.Mean(), true
		}
		rows = append(rows, row)
	}
	return rows
}

// groupTable is the label counts by the values of one group field (app,
// month, ...): one row per value, one cell per label.
type groupTable struct {
	Field  string
	Labels []string
	Rows   []groupRow
	// MaxShare is the largest share of a label in a row, for shading.
	MaxShare float64
}

type groupRow struct {
	Value string
	Cells []int64 // in Labels order
	Total int64
}

// share is n's share of the row, 0..1.
func (r groupRow) share(n int64) float64 {
	if r.Total == 0 {
		return 0
	}
	return float64(n) / float64(r.Total)
}

func groupTables(d *Data) []groupTable {
	labels := d.labelsByCount()
	var out []groupTable
	for _, field := range sortedKeys(d.Tally.Groups) {
		g := groupTable{Field: field, Labels: labels}
		for _, v := range sortedKeys(d.Tally.Groups[field]) {
			row := groupRow{Value: v}
			for _, l := range labels {
				n := d.Tally.Groups[field][v][l]
				row.Cells = append(row.Cells, n)
				row.Total += n
			}
			for _, n := range row.Cells {
				g.MaxShare = max(g.MaxShare, row.share(n))
			}
			g.Rows = append(g.Rows, row)
		}
		// Dates read best in order; anything else by size.
		if !isTimeField(field, g.Rows) {
			slices.SortStableFunc(g.Rows, func(a, b groupRow) int { return cmp.Compare(b.Total, a.Total) })
		}
		out = append(out, g)
	}
	return out
}

// isTimeField says whether a group field's values are dates or months
// (sorted as text they are in time order).
func isTimeField(field string, rows []groupRow) bool {
	switch strings.ToLower(field) {
	case "month", "date", "day", "week", "year":
		return true
	}
	for _, r := range rows {
		if _, err := time.Parse("2006-01", r.Value); err != nil {
			return false
		}
	}
	return len(rows) > 0
}

// deadRow is one reason for dead letters at one stage.
type deadRow struct {
	Stage string
	DeadReason
}

func deadRows(d *Data) []deadRow {
	var out []deadRow
	order := d.stageOrder()
	for _, s := range append(slices.Clone(order), sortedKeys(d.Dead)...) {
		if slices.ContainsFunc(out, func(r deadRow) bool { return r.Stage == s }) {
			continue
		}
		reasons := slices.Clone(d.Dead[s])
		slices.SortStableFunc(reasons, func(a, b DeadReason) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
		})
		for _, r := range reasons {
			out = append(out, deadRow{Stage: s, DeadReason: r})
		}
	}
	return out
}

// Number formatting shared by the renderers.

// num formats n with thousands separators: 1234567 -> "1,234,567".
func num[T ~int | ~int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// pct formats part/whole as a percentage, "0%" when whole is 0.
func pct[T ~int | ~int64](part, whole T, decimals int) string {
	if whole == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', decimals, 64) + "%"
}

// usd formats an estimated cost: 4 decimals under a dollar, 2 above.
func usd(x float64) string {
	if x < 1 {
		return fmt.Sprintf("$%.4f", x)
	}
	return fmt.Sprintf("$%.2f", x)
}

// dur formats a wall time for people: 850ms, 54.8s, 3m12s, 1h05m.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// limitRange describes the concurrency limit of an API stage in a run.
func limitRange(s pipeline.StageStats) string {
	if s.LimitMax == 0 {
		return ""
	}
	if s.LimitMin == s.LimitMax {
		return fmt.Sprintf("%d throughout", s.LimitMax)
	}
	return fmt.Sprintf("%d–%d, ended at %d", s.LimitMin, s.LimitMax, s.LimitEnd)
}

func wall(r pipeline.RunSummary) time.Duration {
	if r.Ended.IsZero() || r.Ended.Before(r.Started) {
		return -1
	}
	return r.Ended.Sub(r.Started)
}
