package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// withSignals cancels ctx on the first SIGINT/SIGTERM (stop taking work,
// let in-flight calls finish) and exits at once on the second: the
// database is consistent at every instant, but the calls in flight then
// are billed and their answers never committed, so the first message
// says so ("nothing is lost either way" hid that money).
// exitNow is called with an error wrapping pipeline.ErrStopped, so that
// the process exits with the stopped code.
func withSignals(ctx context.Context, stderr io.Writer, exitNow func(error)) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		fmt.Fprintln(stderr, "\nstopping: finishing in-flight calls (signal again to exit at once: the database stays consistent, but calls still in flight are paid for and their answers dropped)")
		cancel()
		select {
		case <-ch:
			fmt.Fprintln(stderr, "exiting at once; run again to resume")
			exitNow(fmt.Errorf("second signal: %w", pipeline.ErrStopped))
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(ch); close(done); cancel() }
}
