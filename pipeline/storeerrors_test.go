package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDamagedError_Error(t *testing.T) {
	cause := errors.New("unexpected end of JSON input")
	tests := []struct {
		name string
		err  *DamagedError
		want string
	}{
		{"an item's record", Damaged("r1", "classify", cause, "out/%s is damaged", "classify"),
			`item "r1": out/classify is damaged: unexpected end of JSON input`},
		{"no item, no cause", Damaged("", "", nil, "aggregate entry %q is damaged", "k"), `aggregate entry "k" is damaged`},
		{"an item, no cause", Damaged("r2", "", nil, "corrupt state record"), `item "r2": corrupt state record`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			wrapped := fmt.Errorf("report: %w", tt.err)
			var d *DamagedError
			if !errors.As(wrapped, &d) || d != tt.err || !IsDamaged(wrapped) {
				t.Errorf("errors.As does not find the DamagedError in %v", wrapped)
			}
			if tt.err.Err != nil && !errors.Is(wrapped, cause) {
				t.Errorf("errors.Is does not find the cause in %v", wrapped)
			}
			if strings.Contains(tt.err.Error(), "sawtooth") {
				t.Errorf("the domain names a command: %q", tt.err)
			}
		})
	}
	if IsDamaged(errors.New("disk full")) {
		t.Error("another error is damaged")
	}
}

func TestStoreErrors_areTheirSentinels(t *testing.T) {
	notSawtooth := errors.New("not a sawtooth database")
	tests := []struct {
		name     string
		err      error
		sentinel error
		want     string
	}{
		{"no batch job", &NoBatchJobError{Num: 7}, ErrNotFound, "batch job 7: not found"},
		{"empty database", &EmptyDatabaseError{Path: "a.db", Err: notSawtooth}, notSawtooth, "open a.db: not a sawtooth database (it is empty)"},
		{"two batch jobs", &TwoBatchJobsError{Num: 3, Have: "batches/a", Want: "batches/b"}, nil,
			"batch job 3 is already batches/a, not batches/b: two API jobs for one intent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err.Error() != tt.want {
				t.Errorf("Error() = %q, want %q", tt.err, tt.want)
			}
			if tt.sentinel != nil && !errors.Is(fmt.Errorf("x: %w", tt.err), tt.sentinel) {
				t.Errorf("%v is not %v", tt.err, tt.sentinel)
			}
		})
	}
	e := &EmptyDatabaseError{Path: "a.db", Err: notSawtooth}
	if got, want := e.Text("run it first"), "open a.db: not a sawtooth database (it is empty: run it first)"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}
