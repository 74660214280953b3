package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/cli"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"ok", nil, exitOK},
		{"usage", &cli.UsageError{Err: errors.New("bad flag")}, exitUsage},
		{"wrapped usage", fmt.Errorf("run: %w", &cli.UsageError{Err: errors.New("bad flag")}), exitUsage},
		{"stopped", fmt.Errorf("quota: %w", pipeline.ErrStopped), exitStopped},
		{"fatal", errors.New("disk full"), exitFatal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestRunCLI_UsageErrorPrintedOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runCLI([]string{"sawtooth", "export", "--db", "x.db", "--stage", "classify", "--format", "xml"}, &stdout, &stderr)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
	}
	if n := strings.Count(stderr.String(), "sawtooth: "); n != 1 {
		t.Errorf("the error is printed %d times:\n%s", n, stderr.String())
	}
}
