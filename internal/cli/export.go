package cli

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// exportOptions are `sawtooth export`'s.
type exportOptions struct {
	DB     string
	Stage  string
	Format string
	Out    io.Writer
}

func newExportCommand() *cli.Command {
	var opts exportOptions
	return &cli.Command{
		Name:  "export",
		Usage: "write one row per item with that stage's output fields (stdout)",
		Flags: []cli.Flag{dbFlag(), stageFlag(&opts.Stage, "stage whose outputs to write", true),
			&cli.StringFlag{Name: "format", Category: catOutput, Value: "jsonl", Usage: "output format: jsonl|csv|tsv", Destination: &opts.Format}},
		Before: before("db", "stage"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out = c.String("db"), c.App.Writer
			return runExport(&opts)
		},
	}
}

// runExport writes Stage's outputs to Out.
func runExport(opts *exportOptions) error {
	if err := checkStage("stage", opts.Stage); err != nil {
		return err
	}
	switch opts.Format {
	case "jsonl", "csv", "tsv":
	default:
		return usagef("export: --format must be jsonl, csv or tsv, not %q", opts.Format)
	}
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	return export(opts.Out, db, opts.Stage, opts.Format)
}

// export writes one row per output of stage: JSON lines, or CSV with the
// output's fields as sorted columns after id (TSV: tab-separated).
func export(w io.Writer, db *store.DB, stage, format string) error {
	var (
		cw     *csv.Writer
		header []string
	)
	if format == "csv" || format == "tsv" {
		cw = csv.NewWriter(w)
		if format == "tsv" {
			cw.Comma = '\t'
		}
	}
	enc := json.NewEncoder(w)
	err := db.ForEachOutput(stage, func(rec pipeline.Record, out json.RawMessage) error {
		var fields map[string]any
		if err := json.Unmarshal(out, &fields); err != nil {
			return fmt.Errorf("item %q: output of %s is not a JSON object: %w", rec.ID, stage, err)
		}
		delete(fields, "id")
		if cw == nil {
			row := map[string]any{"id": rec.ID}
			for k, v := range fields {
				row[k] = v
			}
			return enc.Encode(row)
		}
		if header == nil {
			for k := range fields {
				header = append(header, k)
			}
			sort.Strings(header)
			if err := cw.Write(append([]string{"id"}, header...)); err != nil {
				return err
			}
		}
		row := []string{rec.ID}
		for _, k := range header {
			row = append(row, cell(fields[k]))
		}
		return cw.Write(row)
	})
	if cw != nil {
		cw.Flush()
		if err == nil {
			err = cw.Error()
		}
	}
	return err
}

// cell is a CSV cell: strings as they are, anything else as JSON.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}
