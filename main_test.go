package main

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
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

// The error printed at exit cannot drive the terminal, whatever it quotes
// (here a --db path holding an escape sequence).
func TestRunCLI_ErrorIsTerminalSafe(t *testing.T) {
	var stdout, stderr bytes.Buffer
	db := filepath.Join(t.TempDir(), "\x1b[2Jx.db")
	if code := runCLI([]string{"sawtooth", "status", "--db", db}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%q", code, exitUsage, stderr.String())
	}
	if strings.Contains(stderr.String(), "\x1b") || !strings.Contains(stderr.String(), `\x1b[2Jx.db`) {
		t.Errorf("stderr = %q, want the path with its ESC escaped", stderr.String())
	}
}

// A PostgreSQL connection error lists each address pgx tried on a line
// indented by a tab: printed indented, never as a literal \t.
func TestRunCLI_PostgresErrorReadable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runCLI([]string{"sawtooth", "status", "--db", "postgres://sawtooth@127.0.0.1:1/reviews?connect_timeout=5"}, &stdout, &stderr)
	if code != exitFatal {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitFatal, stderr.String())
	}
	if strings.Contains(stderr.String(), `\t`) || strings.Contains(stderr.String(), "\t") || !strings.Contains(stderr.String(), "\n    127.0.0.1:1") {
		t.Errorf("stderr = %q, want each address on its own line indented with spaces", stderr.String())
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct{ name, err, want string }{
		{"one line", "no such database", "no such database"},
		{"indented lines", "failed to connect:\n\thost a: refused\n\t\thost b: refused", "failed to connect:\n    host a: refused\n        host b: refused"},
		{"a tab inside a line is escaped", "field\tvalue", `field\tvalue`},
		{"an escape sequence quoted", "bad id \x1b[2J", `bad id \x1b[2J`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorText(errors.New(tt.err)); got != tt.want {
				t.Errorf("errorText(%q) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
