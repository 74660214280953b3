package cli

import (
	"fmt"
)

// UsageError is a mistake in how a command was called: a missing or bad
// flag, an unknown command, a file that cannot be the input asked for.
// The command changed nothing before returning it.
type UsageError struct{ Err error }

// Error returns the message of the underlying error.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// usagef returns a *UsageError with a formatted message.
func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// usage marks err, if not nil, as a usage error.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}
