package pipeline

import (
	"errors"
	"fmt"
)

// A store that finds a record it cannot read, or one that contradicts
// another, returns these with the facts; what to do about them is a
// command, which the front end names with the database it was given.

// DamagedError is a record in the database that cannot be read or that
// contradicts another: a bug, or a file changed outside the store. A
// check of the whole database (the front end's verify) says what else is
// wrong. Err, when set, is why it cannot be read, for errors.Is and
// errors.As.
type DamagedError struct {
	// Item is the item whose record it is; "" for a record that is no
	// one item's (an aggregate, a queue, the dictionary).
	Item string
	// Stage is the stage the record belongs to; "" for none.
	Stage string
	// Record says which record and what is wrong with it, in the
	// store's terms: "corrupt state record", "out/classify is damaged".
	Record string
	// Err is the decoder's or the store's error, or nil.
	Err error
}

// Damaged returns a *DamagedError for item's record at stage, described by
// format and args, caused by err (which may be nil).
func Damaged(item, stage string, err error, format string, args ...any) *DamagedError {
	return &DamagedError{Item: item, Stage: stage, Record: fmt.Sprintf(format, args...), Err: err}
}

func (e *DamagedError) Error() string {
	msg := e.Record
	if e.Item != "" {
		msg = fmt.Sprintf("item %q: %s", e.Item, msg)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *DamagedError) Unwrap() error { return e.Err }

// IsDamaged says whether err is, or wraps, a *DamagedError.
func IsDamaged(err error) bool {
	var d *DamagedError
	return errors.As(err, &d)
}

// NoBatchJobError is a store's answer for a batch job number it holds no
// record of; it is ErrNotFound.
type NoBatchJobError struct{ Num uint64 }

func (e *NoBatchJobError) Error() string { return fmt.Sprintf("batch job %d: %v", e.Num, ErrNotFound) }
func (e *NoBatchJobError) Unwrap() error { return ErrNotFound }

// TwoBatchJobsError is a store's refusal to record API job Want for batch
// job Num, which already records API job Have: two API jobs were created
// for one intent, and one of them should be cancelled.
type TwoBatchJobsError struct {
	Num        uint64
	Have, Want string
}

func (e *TwoBatchJobsError) Error() string {
	return fmt.Sprintf("batch job %d is already %s, not %s: two API jobs for one intent", e.Num, e.Have, e.Want)
}

// EmptyDatabaseError is a store's refusal to read a database that holds
// no pipeline yet: nothing has been run into it. Err is the store's
// sentinel for what it is not (a sawtooth database), for errors.Is.
type EmptyDatabaseError struct {
	// Path is the database as opened.
	Path string
	Err  error
}

func (e *EmptyDatabaseError) Error() string { return e.Text("") }

// Text is the error's message with next, what to do, when not "".
func (e *EmptyDatabaseError) Text(next string) string {
	if next == "" {
		return fmt.Sprintf("open %s: %v (it is empty)", e.Path, e.Err)
	}
	return fmt.Sprintf("open %s: %v (it is empty: %s)", e.Path, e.Err, next)
}

func (e *EmptyDatabaseError) Unwrap() error { return e.Err }
