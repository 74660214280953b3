//go:build unix

package cli

import (
	"context"
	"strings"
	"syscall"
	"testing"
)

// The first signal's message says what a second one costs: the calls in
// flight are paid for and their answers dropped. It said "nothing is lost
// either way", and a second Ctrl-C during a drain dropped answers paid for.
func TestWithSignals_firstSignalSaysWhatASecondCosts(t *testing.T) {
	var errs syncBuffer
	ctx, stop := withSignals(context.Background(), &errs, func(error) {})
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done() // canceled after the message is written
	for _, want := range []string{"signal again to exit at once", "calls still in flight are paid for and their answers dropped"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("the first signal's message lacks %q:\n%s", want, errs.String())
		}
	}
	if strings.Contains(errs.String(), "nothing is lost") {
		t.Errorf("the message still says nothing is lost:\n%s", errs.String())
	}
}
