package cli

import (
	"io"
	"os"
	"runtime/debug"

	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/urfave/cli/v2"
)

// exportOptions are `sawtooth export`'s.
type exportOptions struct {
	DB string
	// Stage exports the items with an output there; All every item,
	// wherever it stands, with every stage's fields. Exactly one is given.
	Stage  string
	All    bool
	Format string
	// Columns, when set, are the columns written, in order.
	Columns []string
	// CSVRaw writes csv and tsv cells as stored, formulas included.
	CSVRaw bool
	Out    io.Writer
}

func newExportCommand() *cli.Command {
	var (
		opts    exportOptions
		columns cli.StringSlice
	)
	return &cli.Command{
		Name:  "export",
		Usage: "write one row per item (stdout): --all for every stage's fields as columns, or --stage S",
		Description: `--all: one row per item, wherever it stands: id, status (done, queued at
STAGE, in batch at STAGE, dead at STAGE, skipped at STAGE when a stage's
when: condition left it out), the dead-letter reason, every input field,
each stage's output fields as their own columns (classify.label,
classify.confidence, ...) and the prompt/config version that stage ran with
(classify.version: the fingerprint the database records for it).
--stage S: id, the input fields and S's output fields. Numbers are printed
as people write them; the export streams. In csv and tsv a text cell
starting with = + - @, a tab or a carriage return (a formula to a
spreadsheet) gets a leading ' unless --csv-raw; a number such as -3 never
does; jsonl is always exact.`,
		Flags: []cli.Flag{dbFlag(), stageFlag(&opts.Stage, "export the items with an output at this stage (or --all)", false),
			&cli.BoolFlag{Name: "all", Category: catDB, Usage: "every item (done, queued, dead, skipped) with every stage's fields (or --stage)", Destination: &opts.All},
			&cli.StringFlag{Name: "format", Category: catOutput, Value: report.FormatJSONL, Usage: "output format: jsonl|csv|tsv", Destination: &opts.Format},
			&cli.StringSliceFlag{Name: "columns", Category: catOutput, Usage: "write only these `COLUMNS`, in this order", Destination: &columns},
			csvRawFlag(&opts.CSVRaw),
		},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out, opts.Columns = c.String("db"), c.App.Writer, splitList(columns.Value())
			return runExport(&opts)
		},
	}
}

// runExport writes the rows to Out; every option is checked before the
// DB is opened.
func runExport(opts *exportOptions) error {
	switch opts.Format {
	case report.FormatJSONL, report.FormatCSV, report.FormatTSV:
	default:
		return usagef("export: --format must be jsonl, csv or tsv, not %q", opts.Format)
	}
	if opts.CSVRaw && opts.Format == report.FormatJSONL {
		return usagef("export: --csv-raw applies to --format csv or tsv; jsonl is always written exactly: drop it")
	}
	if (opts.Stage == "") == !opts.All {
		return usagef("export: pass exactly one of --stage S or --all")
	}
	// A column named twice wrote a JSON object with the key twice (and
	// a csv header with two columns of one name).
	named := map[string]bool{}
	for _, c := range opts.Columns {
		if named[c] {
			return usagef("export: --columns names %s twice: name each column once", c)
		}
		named[c] = true
	}
	if opts.Stage != "" {
		if err := checkStageOf(opts.DB, "stage", opts.Stage); err != nil {
			return err
		}
	}
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	defer exportGC()()
	err = report.Export(opts.Out, db, report.ExportOptions{Stage: opts.Stage, Format: opts.Format, Columns: opts.Columns, RawCells: opts.CSVRaw})
	return wordReportError("export", wordRecordError(err, db.Path()))
}

// exportGCPercent is the collector's GOGC for an export. An export holds
// at most a few batches of items between the walk and the rows
// (report's overlapped), a live heap of a few MB, so at the default 100 the
// collector ran about a thousand times per million rows, and with its
// write barriers took a sixth of the export's CPU; 400 collects a
// quarter as often for a few MB more heap (the process's RSS is mostly
// the file's mapped pages, released as the walk goes).
const exportGCPercent = 400

// exportMemoryLimit bounds the Go runtime's memory (heap, stacks,
// metadata) during an export. The walk may hold a stage's answers whole
// (up to 64 MB, 38 MB at a million reviews, see store/answertable.go):
// GOGC 400 alone lets the heap grow to five times that before a
// collection (350 MB of RSS at a million items). Under the limit the
// collector runs when the garbage reaches what the limit leaves, still
// less often than at GOGC 400 over a heap of a few MB.
const exportMemoryLimit = 96 << 20

// exportGC sets the collector's percent and memory limit for an export,
// each unless the user set it (GOGC, GOMEMLIMIT), and returns what
// restores them.
func exportGC() (restore func()) {
	oldPercent, oldLimit := -2, int64(-1)
	if os.Getenv("GOGC") == "" {
		oldPercent = debug.SetGCPercent(exportGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		oldLimit = debug.SetMemoryLimit(exportMemoryLimit)
	}
	return func() {
		if oldPercent != -2 {
			debug.SetGCPercent(oldPercent)
		}
		if oldLimit >= 0 {
			debug.SetMemoryLimit(oldLimit)
		}
	}
}

// csvRawFlag is --csv-raw, shared by report and export.
func csvRawFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "csv-raw", Category: catOutput, Destination: dest,
		Usage: "write csv/tsv text cells exactly as stored; by default a cell starting with = + - @ (a formula a spreadsheet would run) gets a leading '"}
}
