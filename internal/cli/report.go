package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// reportOptions are `sawtooth report`'s.
type reportOptions struct {
	DB     string
	Format string
	// Output is the file written; empty means Out.
	Output string
	// Month, From and To choose the period (report.ParseWindow).
	Month, From, To string
	// By is the pivot's group fields; BySet says --by was given (csv
	// pivots by app,month otherwise).
	By    []string
	BySet bool
	// Where keeps items whose FIELD=VALUE.
	Where []string
	// CSVRaw writes csv cells as stored, formulas included.
	CSVRaw      bool
	Out, ErrOut io.Writer
}

func newReportCommand() *cli.Command {
	var (
		opts      reportOptions
		by, where cli.StringSlice
	)
	return &cli.Command{
		Name:  "report",
		Usage: "render what the items say and how the last run went (text|markdown|json|csv|html)",
		Description: `html is one self-contained page for the people who read the results: the
period's headline numbers, the label mix per app with its change since the
previous month, a monthly trend per label and quoted reviews, then the run's
operations (concurrency limit, calls per second, cost) collapsed; markdown
pastes into a chat or a PR.

--by app,month adds a pivot (any group fields, any order): label counts and
shares, average rating and the change against the previous period per row.
--month 2026-11 (or --from/--to) chooses the period, --where app=TaskFlow
filters the items. csv writes the pivot (by app,month unless --by), one
line per row and label; a text cell starting with = + - @ (a formula to a
spreadsheet) gets a leading ' unless --csv-raw.`,
		Flags: []cli.Flag{dbFlag(),
			&cli.StringFlag{Name: "format", Category: catOutput, Value: "text", Usage: "text|markdown|json|csv|html", Destination: &opts.Format},
			&cli.StringFlag{Name: "output", Category: catOutput, Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout", Destination: &opts.Output},
			&cli.StringSliceFlag{Name: "by", Category: catReport, Usage: "pivot by these group `FIELDS` (comma-separated, e.g. app,month)", Destination: &by},
			&cli.StringFlag{Name: "month", Category: catReport, Usage: "the period: one `YYYY-MM`", DefaultText: "the latest month with items", Destination: &opts.Month},
			&cli.StringFlag{Name: "from", Category: catReport, Usage: "the period's first `YYYY-MM`", Destination: &opts.From},
			&cli.StringFlag{Name: "to", Category: catReport, Usage: "the period's last `YYYY-MM`", Destination: &opts.To},
			&cli.StringSliceFlag{Name: "where", Category: catReport, Usage: "keep items whose `FIELD=VALUE` (repeatable)", Destination: &where},
			csvRawFlag(&opts.CSVRaw),
		},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out, opts.ErrOut = c.String("db"), c.App.Writer, c.App.ErrWriter
			opts.By, opts.BySet, opts.Where = splitList(by.Value()), c.IsSet("by"), where.Value()
			return runReport(&opts)
		},
	}
}

// runReport renders the report of the DB to Output or Out. Every option
// is checked before the DB is opened.
func runReport(opts *reportOptions) error {
	render, err := reportRenderer(opts.Format, opts.CSVRaw)
	if err != nil {
		return err
	}
	win, err := report.ParseWindow(opts.Month, opts.From, opts.To)
	if err != nil {
		return wordReportError("report", err)
	}
	filters, err := report.ParseFilters(opts.Where)
	if err != nil {
		return wordReportError("report", err)
	}
	load := report.LoadOptions{Window: win, Where: filters}
	if opts.BySet {
		load.By = opts.By
	} else if opts.Format == "csv" {
		load.By = []string{"app", "month"}
	}
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	data, err := report.Load(db, load)
	if err == nil {
		data.DeadSteps = deadReportSteps(db.Path())
		for _, f := range report.MissingFields(data.Cube, opts.By) {
			if f == "label" {
				// An all-"unknown" row field beside the label columns,
				// and a csv header naming label twice.
				db.Close()
				return usagef("report: --by label: no item has an input field \"label\"; the labels are the pivot's columns already, and --by chooses its rows (app, month or another input field)")
			}
			fmt.Fprintf(opts.ErrOut, "warning: --by %s: no reported item has this field, so every row reads \"unknown\" (check its name against the input's columns)\n", f)
		}
	}
	db.Close()
	if err != nil {
		return wordReportError("report", wordRecordError(err, db.Path()))
	}
	if opts.Output == "" {
		err = render(opts.Out, data)
	} else if err = writeFileAtomic(opts.Output, func(w io.Writer) error { return render(w, data) }); err != nil {
		err = fmt.Errorf("report: %w", err)
	} else {
		fmt.Fprintf(opts.ErrOut, "wrote %s\n", opts.Output)
	}
	if err != nil {
		return wordReportError("report", err)
	}
	recordReport(opts.DB, data, opts.ErrOut)
	return nil
}

// recordReportWait is how long recording a report waits for the file's
// write lock: a report never waits for a run.
const recordReportWait = 50 * time.Millisecond

// recordReport stores the fingerprint of each period's figures data
// showed, so the next report of a period can say they changed. The report
// was read read-only and is already written: a database held by a run
// (or another command) is skipped silently, and any other failure is
// only a warning.
func recordReport(path string, data *report.Data, errOut io.Writer) {
	stamps := data.Stamps()
	if len(stamps) == 0 {
		return
	}
	err := store.SaveReportFingerprints(path, stamps, recordReportWait)
	if err != nil && !errors.Is(err, store.ErrInUse) {
		fmt.Fprintf(errOut, "warning: could not record this report's figures in %s (the next report cannot say what changed since): %v\n", path, err)
	}
}

// reportRenderer is the renderer of a --format; csvRaw picks the csv
// writer that leaves formula cells as they are, and only csv has one.
func reportRenderer(format string, csvRaw bool) (func(io.Writer, *report.Data) error, error) {
	if csvRaw && format != "csv" {
		return nil, usagef("report: --csv-raw applies to --format csv only, not %q: drop it", format)
	}
	if csvRaw {
		return report.RawCSV, nil
	}
	switch format {
	case "text":
		return report.Text, nil
	case "markdown", "md":
		return report.Markdown, nil
	case "html":
		return report.HTML, nil
	case "csv":
		return report.CSV, nil
	case "json":
		return func(w io.Writer, d *report.Data) error { return writeJSON(w, d) }, nil
	default:
		return nil, usagef("report: unknown --format %q (text, markdown, json, csv or html)", format)
	}
}
