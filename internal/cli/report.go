package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// reportOptions are `sawtooth report`'s.
type reportOptions struct {
	DB     string
	Format string
	// Output is the file written; empty means Out.
	Output      string
	Out, ErrOut io.Writer
}

func newReportCommand() *cli.Command {
	var opts reportOptions
	return &cli.Command{
		Name:  "report",
		Usage: "render the aggregate, dead letters and the last run (text|markdown|json|html)",
		Description: `html is one self-contained page (charts of the last run's concurrency limit,
calls per second and items over time; the aggregate; dead letters) to open
in a browser or send to a team; markdown pastes into a chat or a PR.`,
		Flags: []cli.Flag{dbFlag(),
			&cli.StringFlag{Name: "format", Category: catOutput, Value: "text", Usage: "text|markdown|json|html", Destination: &opts.Format},
			&cli.StringFlag{Name: "output", Category: catOutput, Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout", Destination: &opts.Output},
		},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out, opts.ErrOut = c.String("db"), c.App.Writer, c.App.ErrWriter
			return runReport(&opts)
		},
	}
}

// runReport renders the report of the DB to Output or Out.
func runReport(opts *reportOptions) error {
	render, err := reportRenderer(opts.Format)
	if err != nil {
		return err
	}
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	data, err := loadReport(db)
	if err != nil {
		return err
	}
	if opts.Output == "" {
		return render(opts.Out, data)
	}
	if err := writeFileAtomic(opts.Output, func(w io.Writer) error { return render(w, data) }); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(opts.ErrOut, "wrote %s\n", opts.Output)
	return nil
}

// reportRenderer is the renderer of a --format.
func reportRenderer(format string) (func(io.Writer, *report.Data) error, error) {
	switch format {
	case "text":
		return report.Text, nil
	case "markdown", "md":
		return report.Markdown, nil
	case "html":
		return report.HTML, nil
	case "json":
		return func(w io.Writer, d *report.Data) error { return writeJSON(w, d) }, nil
	default:
		return nil, usagef("report: unknown --format %q (text, markdown, json or html)", format)
	}
}

// loadReport reads everything a report shows in a few read transactions.
func loadReport(db *store.DB) (*report.Data, error) {
	d := &report.Data{DB: db.Path(), Generated: time.Now(), Dead: map[string][]report.DeadReason{}}
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
	for _, s := range d.Stages {
		byReason := map[string]*report.DeadReason{}
		err := db.ForEachDead(s, func(e store.DeadEntry) error {
			key := pipeline.ReasonKey(pipeline.DeadLetter{Class: e.Dead.Class, Message: e.Dead.Message})
			r := byReason[key]
			if r == nil {
				r = &report.DeadReason{Reason: key}
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
		sort.Slice(d.Dead[s], func(i, j int) bool {
			a, b := d.Dead[s][i], d.Dead[s][j]
			return a.Count > b.Count || a.Count == b.Count && a.Reason < b.Reason
		})
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

// writeFileAtomic writes path through a temporary file in the same
// directory renamed into place, so a reader never sees half a file.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
