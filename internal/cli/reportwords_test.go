package cli

import (
	"bytes"
	"errors"
	"fmt"
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
		{"not a month", []string{"report", "--to", "2026-13"}, `report: --to "2026-13" is not a month: write it as YYYY-MM`},
		{"month and range", []string{"report", "--month", "2026-11", "--from", "2026-10"}, "report: --month 2026-11 cannot be combined with --from/--to"},
		{"backwards", []string{"report", "--from", "2026-11", "--to", "2026-10"}, "report: --from 2026-11 is after --to 2026-10"},
		{"unknown column", []string{"export", "--all", "--columns", "id,labl"}, `export: --columns: no column "labl"; the columns are: id,status`},
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
