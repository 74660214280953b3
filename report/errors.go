package report

import (
	"errors"
	"fmt"
	"strings"
)

// The errors a report or an export returns for what it was asked: each
// carries the facts (the expression, field or column, and why), and the
// command line words it with the flag that asked, or a job file with its
// key. Their messages name no flag.

// FilterSyntaxError is a filter not written field=value.
type FilterSyntaxError struct {
	// Filter is the filter as given.
	Filter string
}

// Error names the filter and the form wanted.
func (e *FilterSyntaxError) Error() string {
	return fmt.Sprintf("filter %q: write it as field=value, e.g. app=TaskFlow", e.Filter)
}

// GroupFieldError is a pivot field that the cube does not group by, or
// that is asked for twice.
type GroupFieldError struct {
	// Field is the field as given.
	Field string
	// Dims are the fields the cube groups by: the run's group fields
	// and "month".
	Dims []string
	// Twice: the field is named twice (else it is not one of Dims).
	Twice bool
}

// Error names the field and the cube's fields.
func (e *GroupFieldError) Error() string {
	if e.Twice {
		return fmt.Sprintf("group field %s is named twice", e.Field)
	}
	return fmt.Sprintf("%s: no such group field (have %s)", e.Field, strings.Join(e.Dims, ", "))
}

// WindowProblem is what is wrong with a period asked for.
type WindowProblem int

const (
	// NotAMonth: Value is not written YYYY-MM.
	NotAMonth WindowProblem = iota + 1
	// MonthAndRange: a month and a from/to range were both given.
	MonthAndRange
	// FromAfterTo: the range's start is after its end.
	FromAfterTo
)

// WindowError is a period ParseWindow refused.
type WindowError struct {
	Problem WindowProblem
	// Bound is the bound at fault ("month", "from" or "to") and Value
	// its value, for NotAMonth and MonthAndRange.
	Bound, Value string
	// From and To are the range, for FromAfterTo.
	From, To string
}

// Error names the bound at fault and the form wanted.
func (e *WindowError) Error() string {
	switch e.Problem {
	case NotAMonth:
		return fmt.Sprintf("%s %q is not a month: write it as YYYY-MM, e.g. 2026-11", e.Bound, e.Value)
	case MonthAndRange:
		return fmt.Sprintf("month %s cannot be combined with a from/to range: give one month or a range", e.Value)
	default:
		return fmt.Sprintf("from %s is after to %s", e.From, e.To)
	}
}

// ErrUnknownColumn is what an UnknownColumnError is, for errors.Is: a
// mistake in the command, not in the data.
var ErrUnknownColumn = errors.New("unknown column")

// UnknownColumnError is an export column the export does not have.
type UnknownColumnError struct {
	// Column is the column as given; Columns are those there are, in
	// order.
	Column  string
	Columns []string
}

// Error names the column and the columns there are.
func (e *UnknownColumnError) Error() string {
	return fmt.Sprintf("export: no column %q; the columns are: %s", e.Column, strings.Join(e.Columns, ","))
}

// Unwrap returns ErrUnknownColumn.
func (e *UnknownColumnError) Unwrap() error { return ErrUnknownColumn }

// ErrNoPivot is returned by CSV and RawCSV for a report without a pivot:
// the CSV report is the pivot.
var ErrNoPivot = errors.New("the CSV report is the pivot table, and no group fields were asked for")

// RecordError is what the database recorded failing to read as a report
// or an export needs it (the pipeline definition, the aggregate's
// configuration, an item's facts): the database's own records, not what
// was asked, so `verify` is the next step.
type RecordError struct {
	// What is what was being read ("read the recorded pipeline
	// definition").
	What string
	Err  error
}

func (e *RecordError) Error() string { return e.What + ": " + e.Err.Error() }
func (e *RecordError) Unwrap() error { return e.Err }
