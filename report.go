package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

func reportCommand() *cli.Command {
	var format string
	return &cli.Command{
		Name:  "report",
		Usage: "render the aggregate, dead letters and the last run (text|markdown|json)",
		Flags: []cli.Flag{dbFlag(), &cli.StringFlag{Name: "format", Value: "text", Usage: "text|markdown|json", Destination: &format}},
		Action: func(c *cli.Context) error {
			db, err := openReadOnly(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			data, err := loadReport(db)
			if err != nil {
				return err
			}
			switch format {
			case "text":
				return renderText(c.App.Writer, data, false)
			case "markdown", "md":
				return renderText(c.App.Writer, data, true)
			case "json":
				return writeJSON(c.App.Writer, data)
			default:
				return usagef("report: unknown --format %q (text, markdown or json)", format)
			}
		},
	}
}

// reportData is everything a report shows, read once from the DB.
type reportData struct {
	DB      string                `json:"db"`
	Counts  store.Counts          `json:"counts"`
	Tally   pipeline.Tally        `json:"aggregate"`
	Dead    map[string][]deadRow  `json:"dead_letters"`
	LastRun *pipeline.RunSummary  `json:"last_run,omitempty"`
	Samples []pipeline.Sample     `json:"samples,omitempty"`
	Runs    []pipeline.RunSummary `json:"runs,omitempty"`
}

type deadRow struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	IDs    []string `json:"example_ids"`
}

func loadReport(db *store.DB) (*reportData, error) {
	d := &reportData{DB: db.Path(), Dead: map[string][]deadRow{}}
	var err error
	if d.Counts, err = db.Counts(); err != nil {
		return nil, err
	}
	if d.Tally, err = db.Tally(); err != nil {
		return nil, err
	}
	for _, s := range stageNames {
		byReason := map[string]*deadRow{}
		err := db.ForEachDead(s, func(e store.DeadEntry) error {
			k := pipeline.DeadLetter{Class: e.Dead.Class, Message: e.Dead.Message}
			key := pipeline.ReasonKey(k)
			r := byReason[key]
			if r == nil {
				r = &deadRow{Reason: key}
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
			d.Dead[s] = append(d.Dead[s], *r)
		}
		sort.Slice(d.Dead[s], func(i, j int) bool { return d.Dead[s][i].Count > d.Dead[s][j].Count })
	}
	if d.Runs, err = db.Runs(20); err != nil {
		return nil, err
	}
	if len(d.Runs) > 0 {
		d.LastRun = &d.Runs[0]
		if d.Samples, err = db.Samples(d.LastRun.ID); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func renderText(w io.Writer, d *reportData, md bool) error {
	h := func(s string) {
		if md {
			fmt.Fprintf(w, "\n### %s\n\n", s)
		} else {
			fmt.Fprintf(w, "\n%s\n%s\n", s, strings.Repeat("=", len(s)))
		}
	}
	table := func(header []string, rows [][]string) {
		if md {
			fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
			for _, r := range rows {
				fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
			}
			return
		}
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		tw.Flush()
	}
	if md {
		fmt.Fprintf(w, "## sawtooth report: %s\n", d.DB)
	} else {
		fmt.Fprintf(w, "sawtooth report: %s\n", d.DB)
	}
	fmt.Fprintf(w, "\n%d items: %d done", d.Counts.Items, d.Counts.Done)
	for _, s := range d.Counts.Stages {
		if s.Queued > 0 || s.Dead > 0 {
			fmt.Fprintf(w, "; %s: %d queued, %d dead", s.Stage, s.Queued, s.Dead)
		}
	}
	fmt.Fprintln(w)

	labels := sortedKeys(d.Tally.Labels)
	sort.SliceStable(labels, func(i, j int) bool { return d.Tally.Labels[labels[i]] > d.Tally.Labels[labels[j]] })
	h("Labels")
	var rows [][]string
	for _, l := range labels {
		n := d.Tally.Labels[l]
		avg := "-"
		if r, ok := d.Tally.Ratings[l]; ok && r.Count > 0 {
			avg = fmt.Sprintf("%.2f", r.Mean())
		}
		rows = append(rows, []string{l, fmt.Sprint(n), fmt.Sprintf("%.1f%%", 100*float64(n)/float64(max(d.Tally.Items, 1))), avg, strings.Join(d.Tally.Examples[l], " ")})
	}
	table([]string{"label", "items", "share", "avg rating", "examples"}, rows)

	for _, field := range sortedKeys(d.Tally.Groups) {
		h("Label by " + field)
		rows = nil
		for _, v := range sortedKeys(d.Tally.Groups[field]) {
			row := []string{v}
			for _, l := range labels {
				row = append(row, fmt.Sprint(d.Tally.Groups[field][v][l]))
			}
			rows = append(rows, row)
		}
		table(append([]string{field}, labels...), rows)
	}

	h("Dead letters")
	any := false
	for _, s := range stageNames {
		for _, r := range d.Dead[s] {
			any = true
			fmt.Fprintf(w, "%s%s: %d × %s (e.g. %s)\n", bullet(md), s, r.Count, r.Reason, strings.Join(r.IDs, ", "))
		}
	}
	if !any {
		fmt.Fprintln(w, "none")
	}
	if r := d.LastRun; r != nil {
		h("Last run")
		fmt.Fprintf(w, "%s %s: %s in %s %s\n", bullet(md), r.ID, r.Status, r.Ended.Sub(r.Started).Round(time.Second), r.Message)
		if s := r.Stages["classify"]; s != nil && s.Calls > 0 {
			fmt.Fprintf(w, "%sclassify: %d calls, 429 share %.2f%%, %d transient errors, limit %d..%d, tokens %d in / %d out, est. $%.4f\n",
				bullet(md), s.Calls, 100*float64(s.RateLimited)/float64(s.Calls), s.Transient, s.LimitMin, s.LimitMax,
				s.Usage.PromptTokens, s.Usage.CandidateTokens, s.CostUSD)
		}
	}
	return nil
}

func bullet(md bool) string {
	if md {
		return "- "
	}
	return "  "
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
