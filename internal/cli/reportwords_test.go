package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/report"
)

// TestReport_FlagErrorsNameTheFlag: what report refuses in its flags
// (report returns the facts) is a usage error naming the flag, with
// nothing written.
func TestReport_FlagErrorsNameTheFlag(t *testing.T) {
	db := hostileReportDB(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"filter syntax", []string{"report", "--where", "TaskFlow"}, `report: --where "TaskFlow": write it as field=value, e.g. --where app=TaskFlow`},
		{"group field twice", []string{"report", "--by", "app,app"}, "report: --by names app twice"},
		// label is the pivot's columns: grouped by too, every row read
		// "unknown" and the csv header named label twice.
		{"label as a group field", []string{"report", "--by", "app,label", "--format", "csv"}, `report: --by label: no item has an input field "label"; the labels are the pivot's columns already`},
		{"not a month", []string{"report", "--to", "2026-13"}, `report: --to "2026-13" is not a month: write it as YYYY-MM`},
		{"month and range", []string{"report", "--month", "2026-11", "--from", "2026-10"}, "report: --month 2026-11 cannot be combined with --from/--to"},
		{"backwards", []string{"report", "--from", "2026-11", "--to", "2026-10"}, "report: --from 2026-11 is after --to 2026-10"},
		{"unknown column", []string{"export", "--all", "--columns", "id,labl"}, `export: --columns: no column "labl"; the columns are: id,status`},
		{"column twice", []string{"export", "--all", "--columns", "id,status,id"}, "export: --columns names id twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := runApp(append([]string{"sawtooth"}, append(tt.args, "--db", db)...), &out, &errOut)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) || out.Len() > 0 {
				t.Errorf("err %v (stdout %d bytes); want a usage error holding %q and no output", err, out.Len(), tt.want)
			}
		})
	}
}

// TestWordReportError: each of report's typed refusals is worded with the
// flag (a pivot over a cube whose fields are fixed, as a stored cube's
// are, can miss a --by field); any other error is left as it is.
func TestWordReportError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unknown group field", fmt.Errorf("load: %w", &report.GroupFieldError{Field: "ap", Dims: []string{"app", "month"}}),
			"report: --by ap: no such group field: did you mean app? (have app, month); group fields come from the run's --group-by (aggregate.group_by in a job file)"},
		{"no pivot", fmt.Errorf("report: %w", report.ErrNoPivot), "report --format csv writes the pivot: add --by, e.g. --by app,month"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := wordReportError("report", tt.err)
			var ue *UsageError
			if !errors.As(err, &ue) || err.Error() != tt.want {
				t.Errorf("err = %q, want the usage error %q", err, tt.want)
			}
		})
	}
	if other := errors.New("disk full"); wordReportError("report", other) != other {
		t.Error("another error was reworded")
	}
}

// TestWordRecordError: what the database recorded failing to read is
// worded with the verify command for the database given; it is still
// report's error, and any other error passes unchanged.
func TestWordRecordError(t *testing.T) {
	rec := &report.RecordError{What: "read the recorded pipeline definition", Err: errors.New("bad json")}
	err := wordRecordError(fmt.Errorf("x: %w", rec), "/tmp/a b.db")
	if want := "x: read the recorded pipeline definition: bad json (run `sawtooth verify --db '/tmp/a b.db'`)"; err.Error() != want || !errors.Is(err, rec) {
		t.Errorf("err = %q, want %q wrapping the RecordError", err, want)
	}
	if other := errors.New("boom"); wordRecordError(other, "x.db") != other {
		t.Error("another error was reworded")
	}
}

// TestReport_deadStepsNameTheDB: the text report of a database with dead
// letters ends them with the commands that deal with them, for the --db
// given (report itself names no command).
func TestReport_deadStepsNameTheDB(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format2.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old db.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "markdown"} {
		var out, errOut bytes.Buffer
		if err := runApp([]string{"sawtooth", "report", "--db", path, "--format", format}, &out, &errOut); err != nil {
			t.Fatalf("report: %v\n%s", err, errOut.String())
		}
		want := "`sawtooth dlq list --db '" + path + "'` lists them; `sawtooth retry --db '" + path + "' --stage S` re-runs a stage's dead letters"
		if !strings.Contains(out.String(), want) {
			t.Errorf("%s report lacks %q:\n%s", format, want, out.String())
		}
	}
}
