package monitor

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// Options say how a run reports on itself while it runs: log records on
// stderr and, optionally, Prometheus metrics. The run summary on stdout
// does not depend on them.
type Options struct {
	// LogFormat is text (the default when empty) or json.
	LogFormat string
	// LogLevel is debug, info (the default when empty), warn or error.
	LogLevel string
	// MetricsAddr, when set, is the host:port /metrics is served on.
	MetricsAddr string
	// Quiet (--quiet) keeps stderr to what needs reading: no bars, no
	// periodic progress records and no info records, whatever LogLevel
	// says; warnings and errors still come.
	Quiet bool
	// Now is the clock of the bars and progress records; nil means
	// time.Now. Tests step it to make records due without waiting.
	Now func() time.Time
	// Words, when set, rewords each error a log record carries for its
	// reader: the front end adds the commands that deal with it, which
	// the code that logs it does not name. Nil logs errors as they are.
	Words func(error) error
}

// Check returns an error naming the option that cannot work: a log
// format or level, or a metrics address that is malformed or cannot be
// listened on now (it is tried and let go). Commands call it before they
// change anything, so a bad option never fails a run after its ingest.
func (o Options) Check() error {
	if _, err := NewLogger(io.Discard, o.LogFormat, o.LogLevel); err != nil {
		return err
	}
	if o.MetricsAddr != "" {
		ln, err := net.Listen("tcp", o.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %v", o.MetricsAddr, err)
		}
		ln.Close()
	}
	return nil
}

// Logger is NewLogger with o's format and level, at warn or above when
// o.Quiet.
func (o Options) Logger(w io.Writer) (*slog.Logger, error) {
	return newLogger(w, o.LogFormat, o.LogLevel, o.Quiet, o.Words)
}

// NewLogger returns the logger of one command: text or JSON records on w
// at level and above. An error names the option that is wrong.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	return newLogger(w, format, level, false, nil)
}

func newLogger(w io.Writer, format, level string, quiet bool, words func(error) error) (*slog.Logger, error) {
	var lv slog.Level // zero: info
	if err := lv.UnmarshalText([]byte(level)); level != "" && err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if quiet {
		lv = max(lv, slog.LevelWarn)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if words != nil {
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
				a.Value = slog.StringValue(words(err).Error())
			}
			return a
		}
	}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// IsTerminal says whether w is a terminal that can redraw live bars.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}
