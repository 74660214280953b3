package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/urfave/cli/v2"
)

func reportCommand() *cli.Command {
	var format, output, month, from, to string
	var by, where cli.StringSlice
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
line per row and label.`,
		Flags: []cli.Flag{dbFlag(),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text|markdown|json|csv|html", Destination: &format},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout", Destination: &output},
			&cli.StringSliceFlag{Name: "by", Usage: "pivot by these group `FIELDS` (comma-separated, e.g. app,month)", Destination: &by},
			&cli.StringFlag{Name: "month", Usage: "the period: one `YYYY-MM` (default: the latest month with items)", Destination: &month},
			&cli.StringFlag{Name: "from", Usage: "the period's first `YYYY-MM`", Destination: &from},
			&cli.StringFlag{Name: "to", Usage: "the period's last `YYYY-MM`", Destination: &to},
			&cli.StringSliceFlag{Name: "where", Usage: "keep items whose `FIELD=VALUE` (repeatable)", Destination: &where},
		},
		Action: func(c *cli.Context) error {
			render, err := reportRenderer(format)
			if err != nil {
				return err
			}
			win, err := report.ParseWindow(month, from, to)
			if err != nil {
				return usagef("report: %v", err)
			}
			filters, err := report.ParseFilters(where.Value())
			if err != nil {
				return usagef("report: %v", err)
			}
			opts := report.LoadOptions{Window: win, Where: filters}
			if c.IsSet("by") {
				opts.By = splitList(by.Value())
			} else if format == "csv" {
				opts.By = []string{"app", "month"}
			}
			db, err := openReadOnly(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			data, err := report.Load(db, opts)
			if err != nil {
				return err
			}
			if output == "" {
				return render(c.App.Writer, data)
			}
			if err := writeFileAtomic(output, func(w io.Writer) error { return render(w, data) }); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", output)
			return nil
		},
	}
}

func reportRenderer(format string) (func(io.Writer, *report.Data) error, error) {
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
