package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
)

// report returns what was wrong with what it was asked (a filter, a group
// field, a period, a column) as typed errors with the facts; here they
// are worded with the flag that asked, as usage errors (exit 2): the
// command changed nothing.

// windowFlags are the flags that set each bound of report's period.
var windowFlags = map[string]string{"month": "--month", "from": "--from", "to": "--to"}

// wordRecordError words a report's or an export's failure to read what
// the database at db recorded with the command that checks it, and a
// store's error (a damaged record among them) as wordStore does; any other
// error is returned as it is.
func wordRecordError(err error, db string) error {
	var rec *report.RecordError
	if !errors.As(err, &rec) || pipeline.IsDamaged(err) {
		return wordStore(err, db)
	}
	return &wordedError{err: err, msg: fmt.Sprintf("%v (run `sawtooth verify --db %s`)", err, shellQuote(db))}
}

// deadReportSteps are what a report of the database at db says under its
// dead letters: the commands that deal with them.
func deadReportSteps(db string) []report.Step {
	p := shellQuote(db)
	return []report.Step{{Command: "sawtooth dlq list --db " + p, Does: "lists them"},
		{Command: "sawtooth retry --db " + p + " --stage S", Does: "re-runs a stage's dead letters"}}
}

// wordReportError words report's refusals of report's and export's
// flags; any other error is returned as it is.
func wordReportError(cmd string, err error) error {
	var (
		syntax  *report.FilterSyntaxError
		unknown *report.UnknownFieldError
		group   *report.GroupFieldError
		window  *report.WindowError
		column  *report.UnknownColumnError
	)
	switch {
	case errors.As(err, &syntax):
		return usagef("%s: --where %q: write it as field=value, e.g. --where app=TaskFlow", cmd, syntax.Filter)
	case errors.As(err, &unknown):
		return usagef("%s: --where %s: no item has a field %q%s (the fields are: %s)", cmd, unknown.Field, unknown.Field,
			didYouMean(unknown.Field, unknown.Known, "%s"), strings.Join(unknown.Known, ", "))
	case errors.As(err, &group) && group.Twice:
		return usagef("%s: --by names %s twice", cmd, group.Field)
	case errors.As(err, &group):
		return usagef("%s: --by %s: no such group field%s (have %s); group fields come from the run's --group-by (aggregate.group_by in a job file)",
			cmd, group.Field, didYouMean(group.Field, group.Dims, "%s"), strings.Join(group.Dims, ", "))
	case errors.As(err, &window):
		switch window.Problem {
		case report.NotAMonth:
			return usagef("%s: %s %q is not a month: write it as YYYY-MM, e.g. 2026-11", cmd, windowFlags[window.Bound], window.Value)
		case report.MonthAndRange:
			return usagef("%s: --month %s cannot be combined with --from/--to: give one month or a range", cmd, window.Value)
		default:
			return usagef("%s: --from %s is after --to %s", cmd, window.From, window.To)
		}
	case errors.As(err, &column):
		return usagef("%s: --columns: no column %q; the columns are: %s", cmd, column.Column, strings.Join(column.Columns, ","))
	case errors.Is(err, report.ErrNoPivot):
		return usagef("%s --format csv writes the pivot: add --by, e.g. --by app,month", cmd)
	}
	return err
}
