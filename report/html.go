package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

//go:embed report.html.tmpl
var htmlSource string

var htmlTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"num": func(v any) string {
		switch n := v.(type) {
		case int:
			return num(n)
		case int64:
			return num(n)
		}
		return fmt.Sprint(v)
	},
	"usd": usd,
}).Parse(htmlSource))

// HTML writes the report as one self-contained HTML page for the people
// who read its results. First the period (Data.Window, else the latest
// month): headline numbers against the previous period, the label mix per
// app with its change, a monthly trend per label (SVG small multiples),
// three quotes per label (and per label and row of the pivot), and the
// --by pivot when there is one; then the labels and groups of every month.
// The run's operations (summary cards, the last run's charts of the
// concurrency limit, calls per second and items completed, the stage
// table, dead letters and recent runs) follow, collapsed under a
// <details>. It loads nothing and runs no script.
func HTML(w io.Writer, d *Data) error {
	v, err := newHTMLView(d)
	if err != nil {
		return err
	}
	var b strings.Builder
	if err := htmlTemplate.Execute(&b, v); err != nil {
		return err
	}
	// html/template escapes markup but passes control and format
	// characters through, from any value that reaches the page (an app
	// name, an id, a label, an SVG title): escaping the whole page once
	// leaves none behind, whichever field held it.
	_, err = io.WriteString(w, pageText(b.String()))
	return err
}

type htmlView struct {
	Name string
	DB   string
	// DeadSteps are Data.DeadSteps, terminal-safe.
	DeadSteps []Step
	Generated string
	// Where is Data.Where joined, "" without filters.
	Where string
	// Changes are Data.ChangeNotes: the months whose figures changed
	// since their last report.
	Changes []string
	// CostNotes are Data.KilledCostNotes: how killed runs were priced.
	CostNotes []string
	Cards     []card
	Run       *runView
	Charts    []chartView
	Labels    []labelView
	Groups    []groupView
	Dead      []deadRow
	DeadTotal int
	Runs      []runView
	Readers   *readersView
}

type card struct {
	Label, Value, Note, Class string
}

type runView struct {
	ID, Status, Message, Started, Wall string
	StatusClass                        string
	API                                string
	Calls, Share, Limit, Cost          string
	Stages                             []stageRow
	Total                              stageRow
	// Tiers is the calls by service tier (none all on standard);
	// CacheLines what implicit caching saved.
	Tiers      []tierRow
	CacheLines []string
}

type chartView struct {
	ID, Title, Caption string
	SVG                template.HTML
}

type labelView struct {
	labelRow
	SharePct float64 // 0..100, one decimal
	Avg      string
}

type groupView struct {
	Field  string
	Labels []string
	Rows   []groupRowView
	Totals []int64 // per label, over all rows
	Total  int64
}

type groupRowView struct {
	Value string
	Cells []heatCell
	Total int64
}

type heatCell struct {
	N     int64
	Pct   float64 // share of the row, percent
	Level int     // 0..5 shade, by share of the row
}

func newHTMLView(d *Data) (htmlView, error) {
	readers, err := newReadersView(d)
	if err != nil {
		return htmlView{}, err
	}
	v := htmlView{Readers: readers, Name: termText(filepath.Base(d.DB)), DB: termText(d.DB), DeadSteps: safeSteps(d.DeadSteps), DeadTotal: d.deadTotal(), Dead: deadRows(d)}
	for i := range v.Dead {
		v.Dead[i].Reason = termText(v.Dead[i].Reason)
		v.Dead[i].IDs = slices.Clone(v.Dead[i].IDs)
		for j, id := range v.Dead[i].IDs {
			v.Dead[i].IDs[j] = termText(id)
		}
	}
	v.Where = termText(strings.Join(d.Where, ", "))
	if !d.Generated.IsZero() {
		v.Generated = d.Generated.In(d.zone()).Format("2006-01-02 15:04 MST")
	}
	for _, n := range d.ChangeNotes() {
		v.Changes = append(v.Changes, termText(n))
	}
	if d.LastRun != nil {
		for _, n := range d.KilledCostNotes(d.LastRun.ID) {
			v.CostNotes = append(v.CostNotes, termText(n))
		}
	}
	d.addCards(&v)
	for _, c := range runCharts(d) {
		v.Charts = append(v.Charts, chartView{ID: c.ID, Title: c.Title, Caption: c.Caption, SVG: c.SVG()})
	}
	for _, l := range labelRows(d) {
		lv := labelView{labelRow: l, SharePct: math.Round(1000*l.Share) / 10, Avg: "–"}
		if l.HasMean {
			lv.Avg = fmt.Sprintf("%.2f", l.Rating)
		}
		v.Labels = append(v.Labels, lv)
	}
	v.Groups = groupViews(d)
	for i, r := range d.Runs {
		if i == 10 {
			break
		}
		v.Runs = append(v.Runs, newRunView(r, d))
	}
	return v, nil
}

// addCards sets the figures at the top of the HTML report and the last
// run's view.
func (d *Data) addCards(v *htmlView) {
	v.Cards = append(v.Cards,
		card{Label: "items", Value: num(d.Counts.Items), Note: fmt.Sprintf("%s queued", num(d.queuedTotal()))},
		card{Label: "done", Value: num(d.Counts.Done), Note: pct(d.Counts.Done, d.Counts.Items, 1) + " of items", Class: "good"},
		card{Label: "dead letters", Value: num(v.DeadTotal), Note: pct(v.DeadTotal, d.Counts.Items, 1) + " of items", Class: map[bool]string{true: "warn"}[v.DeadTotal > 0]},
	)
	if r := d.LastRun; r != nil {
		rv := newRunView(*r, d)
		v.Run = &rv
		v.Cards = append(v.Cards, card{Label: "last run", Value: dur(wall(*r)), Note: r.Status, Class: rv.StatusClass})
		if rv.API != "" {
			s := r.Stages[rv.API]
			v.Cards = append(v.Cards,
				card{Label: "429 share", Value: rv.Share, Note: fmt.Sprintf("of %s calls", rv.Calls), Class: map[bool]string{true: "warn"}[s.Calls > 0 && float64(s.RateLimited)/float64(s.Calls) > 0.05]},
				card{Label: "concurrency limit", Value: fmt.Sprintf("%d–%d", s.LimitMin, s.LimitMax), Note: fmt.Sprintf("ended at %d", s.LimitEnd)},
				card{Label: "est. cost", Value: d.runCostText(*r), Note: fmt.Sprintf("%s tokens in, %s out", compact(s.Usage.PromptTokens), compact(s.Usage.CandidateTokens))},
			)
			if s.Cached > 0 {
				v.Cards = append(v.Cards, card{Label: "cached answers", Value: num(s.Cached),
					Note: fmt.Sprintf("%s saved; %s paid calls", usd(s.SavedUSD), num(s.Paid)), Class: "good"})
			}
		}
	}
	if b := d.Batch; b != nil {
		v.Cards = append(v.Cards, card{Label: "batch saved", Value: usd(b.SavedUSD), Note: fmt.Sprintf("%s items in %s batch jobs at half price", num(b.Answered), num(b.Jobs)), Class: "good"})
	}
}

// groupViews are the label tables per group field, as heat maps.
func groupViews(d *Data) []groupView {
	var out []groupView
	for _, g := range groupTables(d) {
		gv := groupView{Field: g.Field, Labels: g.Labels, Totals: make([]int64, len(g.Labels))}
		for _, r := range g.Rows {
			rv := groupRowView{Value: r.Value, Total: r.Total}
			for i, n := range r.Cells {
				c := heatCell{N: n, Pct: math.Round(1000*r.share(n)) / 10}
				if n > 0 && g.MaxShare > 0 {
					c.Level = max(1, int(math.Round(5*r.share(n)/g.MaxShare)))
				}
				rv.Cells = append(rv.Cells, c)
				gv.Totals[i] += n
			}
			gv.Total += r.Total
			gv.Rows = append(gv.Rows, rv)
		}
		out = append(out, gv)
	}
	return out
}

func newRunView(r pipeline.RunSummary, d *Data) runView {
	order, zone, unpriced := d.stageOrder(), d.zone(), d.unpricedStages(r.ID)
	// html/template escapes markup but passes control characters through;
	// a run's id and message may quote a server.
	rv := runView{ID: termText(r.ID), Status: termText(r.Status), Message: termText(r.Message), Wall: dur(wall(r)), Stages: stageRows(&r, order, unpriced)}
	if !r.Started.IsZero() {
		rv.Started = r.Started.In(zone).Format("2006-01-02 15:04:05")
	}
	switch r.Status {
	case "complete":
		rv.StatusClass = "good"
	case "stopped":
		rv.StatusClass = "warn"
	case "failed":
		rv.StatusClass = "bad"
	default:
		rv.StatusClass = "info"
	}
	rv.Total = stageRow{Name: "total", StageStats: r.Totals(), Cost: d.runCostText(r)}
	rv.Tiers = tierRows(&r, order)
	for _, l := range cacheLines(&r, order) {
		rv.CacheLines = append(rv.CacheLines, termText(l))
	}
	for i := range rv.Tiers {
		rv.Tiers[i].Stage, rv.Tiers[i].Tier = termText(rv.Tiers[i].Stage), termText(rv.Tiers[i].Tier)
	}
	if rv.API = apiStage(&r); rv.API != "" {
		s := r.Stages[rv.API]
		rv.Calls = num(s.Calls)
		rv.Share = pct(s.RateLimited, s.Calls, 2)
		rv.Limit = limitRange(*s)
	}
	if rv.API != "" || r.Totals().Usage != (pipeline.Usage{}) {
		rv.Cost = d.runCostText(r)
	}
	return rv
}

// compact formats a count for a card: 186152 -> "186k".
func compact(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	default:
		return num(n)
	}
}

// safeSteps is steps with no control characters.
func safeSteps(steps []Step) []Step {
	out := make([]Step, len(steps))
	for i, s := range steps {
		out[i] = Step{Command: termText(s.Command), Does: termText(s.Does)}
	}
	return out
}
