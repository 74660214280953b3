package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestParseFilters_Errors: a filter not written field=value is refused
// with the filter as given and no flag in the message.
func TestParseFilters_Errors(t *testing.T) {
	tests := []struct {
		name  string
		where []string
		want  *FilterSyntaxError
	}{
		{"no equals sign", []string{"app=A", "TaskFlow"}, &FilterSyntaxError{Filter: "TaskFlow"}},
		{"no field", []string{" =x"}, &FilterSyntaxError{Filter: " =x"}},
		{"good", []string{"app=A", "label = bug"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFilters(tt.where)
			var fe *FilterSyntaxError
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tt.want != nil && (!errors.As(err, &fe) || *fe != *tt.want || strings.Contains(err.Error(), "--")):
				t.Fatalf("err = %v, want %+v and no flag", err, tt.want)
			}
		})
	}
}

// TestWriteFlat_UnknownColumn: a column the export does not have is an
// UnknownColumnError naming it and the columns there are; it is
// ErrUnknownColumn, and nothing is written.
func TestWriteFlat_UnknownColumn(t *testing.T) {
	var out bytes.Buffer
	err := WriteFlat(&out, func(func(FlatItem) error) error { return nil }, FlatOptions{Format: FormatCSV, Columns: []string{"id", "labl"}})
	var ce *UnknownColumnError
	if !errors.As(err, &ce) || !errors.Is(err, ErrUnknownColumn) || ce.Column != "labl" || len(ce.Columns) == 0 || strings.Contains(err.Error(), "--") {
		t.Fatalf("err = %v, want an UnknownColumnError for labl with the columns and no flag", err)
	}
	if out.Len() != 0 {
		t.Errorf("wrote %q before refusing", out.String())
	}
}

// TestCSV_NoPivot: the CSV report of data without a pivot is ErrNoPivot.
func TestCSV_NoPivot(t *testing.T) {
	var out bytes.Buffer
	if err := CSV(&out, &Data{}); !errors.Is(err, ErrNoPivot) {
		t.Fatalf("CSV = %v, want ErrNoPivot", err)
	}
}
