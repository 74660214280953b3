package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Text writes the report as plain text for a terminal.
func Text(w io.Writer, d *Data) error { return writeText(w, d, false) }

// Markdown writes the report as GitHub-flavoured Markdown, to paste into a
// chat message or a pull request.
func Markdown(w io.Writer, d *Data) error { return writeText(w, d, true) }

// textWriter renders headings, tables and bullets as text or Markdown and
// keeps the first write error.
type textWriter struct {
	w   io.Writer
	md  bool
	err error
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

func (t *textWriter) heading(s string) {
	if t.md {
		t.printf("\n### %s\n\n", s)
	} else {
		t.printf("\n%s\n%s\n", s, strings.Repeat("=", len([]rune(s))))
	}
}

func (t *textWriter) bullet() string {
	if t.md {
		return "- "
	}
	return "  "
}

// s makes a value from the data safe to print: in Markdown, literal text
// (no HTML, links, images or emphasis); on a terminal, no control
// characters. Every string that came from the data goes through s; the
// format strings are ours.
func (t *textWriter) s(v string) string {
	if t.md {
		return mdText(v)
	}
	return termText(v)
}

// code is a command from the data in backticks, a Markdown code span
// (literal text: a longer fence when it holds a backtick); on a
// terminal, with no control characters.
func (t *textWriter) code(v string) string {
	v = termText(v)
	if t.md && strings.Contains(v, "`") {
		return "`` " + v + " ``"
	}
	return "`" + v + "`"
}

func (t *textWriter) table(header []string, right []bool, rows [][]string) {
	if t.err != nil {
		return
	}
	if t.md {
		t.printf("| %s |\n|", strings.Join(header, " | "))
		for i := range header {
			if i < len(right) && right[i] {
				t.printf(" ---: |")
			} else {
				t.printf(" --- |")
			}
		}
		t.printf("\n")
		for _, r := range rows {
			t.printf("| %s |\n", strings.Join(r, " | "))
		}
		return
	}
	tw := tabwriter.NewWriter(t.w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	t.err = tw.Flush()
}

func writeText(w io.Writer, d *Data, md bool) error {
	t := &textWriter{w: w, md: md}
	t.header(d)
	if r := d.LastRun; r != nil {
		t.lastRun(d, r)
	}
	if d.Batch != nil {
		t.printf("%s%s\n", t.bullet(), batchLine(d.Batch))
	}
	t.labels(d)
	t.groups(d)
	if d.Pivot != nil {
		t.pivot(d.Pivot)
	}
	t.deadLetters(d)
	return t.err
}

// header writes the title, the filters and notes, and the item counts.
func (t *textWriter) header(d *Data) {
	if t.md {
		t.printf("## sawtooth report: %s\n", t.s(d.DB))
	} else {
		t.printf("sawtooth report: %s\n", t.s(d.DB))
	}
	if !d.Generated.IsZero() {
		t.printf("\ngenerated %s\n", d.Generated.In(d.zone()).Format("2006-01-02 15:04 MST"))
	}
	if len(d.Where) > 0 {
		t.printf("\nwhere %s: the items, labels, groups, pivot and dead letters below count only the items that match (the runs' figures are whole)\n", t.s(strings.Join(d.Where, ", ")))
	}
	if notes := d.ChangeNotes(); len(notes) > 0 {
		t.printf("\n")
		for _, n := range notes {
			t.printf("%s%s\n", t.bullet(), t.s(n))
		}
	}

	t.printf("\n%s items: %s done, %s dead letters, %s queued", num(d.Counts.Items), num(d.Counts.Done), num(d.deadTotal()), num(d.queuedTotal()))
	var parts []string
	for _, s := range d.Counts.Stages {
		if s.Queued > 0 || s.Dead > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s queued, %s dead", t.s(s.Stage), num(s.Queued), num(s.Dead)))
		}
	}
	if len(parts) > 0 {
		t.printf(" (%s)", strings.Join(parts, "; "))
	}
	t.printf("\n")
}

// lastRun writes the last run's line, its API stage's figures and its
// stage and tier tables.
func (t *textWriter) lastRun(d *Data, r *pipeline.RunSummary) {
	t.heading("Last run")
	t.printf("%s%s: %s in %s", t.bullet(), t.s(r.ID), t.s(r.Status), dur(wall(*r)))
	if r.Message != "" {
		t.printf(" (%s)", t.s(r.Message))
	}
	t.printf("\n")
	unpriced := d.unpricedStages(r.ID)
	if api := apiStage(r); api != "" {
		s := r.Stages[api]
		t.printf("%s%s: %s calls, 429 share %s, %s 5xx/timeouts, %s unreachable, concurrency limit %s; %s tokens in / %s out, est. %s\n",
			t.bullet(), t.s(api), num(s.Calls), pct(s.RateLimited, s.Calls, 2), num(s.Transient), num(s.Unavailable), limitRange(*s),
			num(s.Usage.PromptTokens), num(s.Usage.CandidateTokens), costText(s.CostUSD, unpriced[api]))
		if s.Cached > 0 {
			t.printf("%s%s: %s paid calls, %s cached answers (no call), %s spent, %s saved by the cache\n",
				t.bullet(), t.s(api), num(s.Paid), num(s.Cached), usd(s.CostUSD), usd(s.SavedUSD))
		}
	}
	for _, n := range d.KilledCostNotes(r.ID) {
		t.printf("%s%s\n", t.bullet(), t.s(n))
	}
	t.printf("\n")
	var rows [][]string
	for _, s := range stageRows(r, d.stageOrder(), unpriced) {
		rows = append(rows, []string{t.s(s.Name), num(s.Done), num(s.Dead), num(s.Attempts), num(s.Calls), num(s.RateLimited), num(s.Transient), num(s.Unavailable),
			num(s.Usage.PromptTokens), num(s.Usage.CandidateTokens), s.Cost})
	}
	t.table([]string{"stage", "done", "dead", "attempts", "calls", "429s", "5xx/timeouts", "unreachable", "tokens in", "tokens out", "est. cost"},
		[]bool{false, true, true, true, true, true, true, true, true, true, true}, rows)
	if tiers := tierRows(r, d.stageOrder()); len(tiers) > 0 {
		t.heading("Service tiers, last run")
		t.table(tierTable(tiers, t.s))
	}
	for _, l := range cacheLines(r, d.stageOrder()) {
		t.printf("%s%s\n", t.bullet(), t.s(l))
	}
}

// labels writes the label table.
func (t *textWriter) labels(d *Data) {
	labels := labelRows(d)
	t.heading("Labels")
	if len(labels) == 0 {
		t.printf("no item has been aggregated yet\n")
	} else {
		var rows [][]string
		for _, l := range labels {
			avg := "-"
			if l.HasMean {
				avg = fmt.Sprintf("%.2f", l.Rating)
			}
			var ids []string
			for _, id := range l.Examples {
				ids = append(ids, t.s(id))
			}
			rows = append(rows, []string{t.s(l.Label), num(l.Items), fmt.Sprintf("%.1f%%", 100*l.Share), avg, strings.Join(ids, " ")})
		}
		t.table([]string{"label", "items", "share", "avg rating", "examples"}, []bool{false, true, true, true, false}, rows)
	}
}

// groups writes a label table per group field.
func (t *textWriter) groups(d *Data) {
	for _, g := range groupTables(d) {
		t.heading("Label by " + t.s(g.Field))
		var rows [][]string
		for _, r := range g.Rows {
			row := []string{t.s(r.Value)}
			for _, n := range r.Cells {
				row = append(row, num(n))
			}
			rows = append(rows, append(row, num(r.Total)))
		}
		header := []string{t.s(g.Field)}
		for _, l := range g.Labels {
			header = append(header, t.s(l))
		}
		header = append(header, "total")
		right := make([]bool, len(header))
		for i := 1; i < len(right); i++ {
			right[i] = true
		}
		t.table(header, right, rows)
	}
}

// deadLetters writes the dead letters by stage and reason.
func (t *textWriter) deadLetters(d *Data) {
	t.heading("Dead letters")
	dead := deadRows(d)
	if len(dead) == 0 {
		t.printf("none\n")
	} else if t.md {
		var rows [][]string
		for _, r := range dead {
			rows = append(rows, []string{t.s(r.Stage), num(r.Count), t.s(r.Reason), t.s(strings.Join(r.IDs, ", "))})
		}
		t.table([]string{"stage", "items", "reason", "e.g."}, []bool{false, true, false, false}, rows)
	} else {
		for _, r := range dead {
			t.printf("%s%s: %d × %s (e.g. %s)\n", t.bullet(), t.s(r.Stage), r.Count, t.s(r.Reason), t.s(strings.Join(r.IDs, ", ")))
		}
	}
	if len(dead) > 0 && len(d.DeadSteps) > 0 {
		steps := make([]string, len(d.DeadSteps))
		for i, s := range d.DeadSteps {
			steps[i] = t.code(s.Command) + " " + t.s(s.Does)
		}
		t.printf("\n%s%s\n", t.bullet(), strings.Join(steps, "; "))
	}
}
