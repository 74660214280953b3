package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Watch prints a status frame every period until ctx is done or the user
// presses Ctrl-C. frame writes one frame (the caller decides where the
// figures come from: the live status or the DB at path). On a terminal
// each frame replaces the last; JSON frames are one compact object per
// line; an error is shown as a frame and the watch goes on.
func Watch(ctx context.Context, w io.Writer, path string, asJSON bool, every time.Duration, frame func(io.Writer) error) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("status --watch: %w", err)
	}
	return WatchFrames(ctx, w, path, asJSON, every, frame)
}

// WatchFrames is Watch for a database that is no file (PostgreSQL: path
// is its URL without the password).
func WatchFrames(ctx context.Context, w io.Writer, path string, asJSON bool, every time.Duration, frame func(io.Writer) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tty := !asJSON && IsTerminal(w)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var buf bytes.Buffer
		err := frame(&buf)
		switch {
		case err != nil && asJSON:
			buf.Reset()
			b, _ := json.Marshal(map[string]string{"db": path, "error": err.Error(), "time": time.Now().Format(time.RFC3339)})
			buf.Write(append(b, '\n'))
		case err != nil:
			fmt.Fprintf(&buf, "%s\n", TerminalSafeLines(err.Error()))
		case asJSON:
			var c bytes.Buffer
			if json.Compact(&c, buf.Bytes()) == nil {
				buf.Reset()
				buf.Write(append(c.Bytes(), '\n'))
			}
		}
		var out bytes.Buffer
		switch {
		case tty:
			// Home, clear the screen, then the frame: one write, no flicker.
			fmt.Fprintf(&out, "\x1b[H\x1b[2J%s  (every %s; Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), every)
		case !asJSON:
			fmt.Fprintf(&out, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		out.Write(buf.Bytes())
		if _, err := w.Write(out.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
