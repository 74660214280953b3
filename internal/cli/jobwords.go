package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/job"
)

// A job file that is not there, or that holds nothing, is a fact the job
// package returns typed; the command that writes a starter one is worded
// here.

// wordJobFile words err, job.Load's, with the command that writes a
// starter job file; any other error is returned as it is.
func wordJobFile(err error) error {
	var (
		missing *job.NoFileError
		jes     job.Errors
	)
	switch {
	case errors.As(err, &missing):
		return &wordedError{err: err, msg: fmt.Sprintf("%v (write a starter one with `sawtooth init %s`)", err, shellQuote(missing.Path))}
	case errors.Is(err, job.ErrEmpty) && errors.As(err, &jes):
		lines := make([]string, len(jes))
		for i, e := range jes {
			lines[i] = e.Error()
			if errors.Is(e, job.ErrEmpty) {
				lines[i] += " (see `sawtooth init`)"
			}
		}
		return &wordedError{err: err, msg: strings.Join(lines, "\n")}
	}
	return err
}
