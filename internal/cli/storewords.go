package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// A store says what it found (a damaged record, a batch job it has no
// record of, two API jobs for one intent, a database with nothing in it)
// as typed errors with the facts; what to do about them is a command,
// worded here with the database the user named.

// unknownDB stands for the database in a command when the command line
// named none (a job file's db).
const unknownDB = "FILE"

// wordStore words the store's error err carries, if any, with the
// command that deals with it, run on the database db; any other error is
// returned as it is, and so is one worded already.
func wordStore(err error, db string) error {
	if err == nil {
		return nil
	}
	var done *storeWordedError
	if errors.As(err, &done) {
		return err
	}
	p := unknownDB
	switch {
	case isPostgres(db):
		p = shellQuote(postgres.Redact(db))
	case db != "":
		p = shellQuote(db) // a file's name as it is: Redact would split it into keywords
	}
	var (
		damaged *pipeline.DamagedError
		noJob   *pipeline.NoBatchJobError
		twoJobs *pipeline.TwoBatchJobsError
		empty   *pipeline.EmptyDatabaseError
		reason  error
		hint    string // what to do, in parentheses after the reason
		text    string // the reason with what to do
	)
	switch {
	case errors.As(err, &damaged):
		reason, hint = damaged, fmt.Sprintf("(run `sawtooth verify --db %s`)", p)
	case errors.As(err, &noJob):
		reason, hint = noJob, fmt.Sprintf("(see `sawtooth batch list --db %s`)", p)
	case errors.As(err, &twoJobs):
		// Only the recorded job (Have) is ever collected; `batch cancel N`
		// would cancel that one and leave the other paid and unread.
		reason, hint = twoJobs, fmt.Sprintf("(a run collects %s; %s is not recorded, so the run cancels it at the API: if its log says that cancel failed, cancel it there; `sawtooth batch list --db %s` shows job %d)", twoJobs.Have, twoJobs.Want, p, twoJobs.Num)
	case errors.As(err, &empty):
		next := fmt.Sprintf("run `sawtooth run --db %s --input FILE` first", p)
		reason, hint, text = empty, "("+next+")", empty.Text(next)
	default:
		return err
	}
	if text == "" {
		text = reason.Error() + " " + hint
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, reason.Error()); i >= 0 {
		msg = msg[:i] + text + msg[i+len(reason.Error()):]
	} else {
		msg += " " + hint // a wrap that rewrote the reason's words
	}
	return &storeWordedError{wordedError{err: err, msg: msg}}
}

// storeWordedError is an error wordStore has worded: a command that knows
// its database better than its flags (a job file's db) words its errors
// itself, and the words are not added twice.
type storeWordedError struct{ wordedError }

// commandDB is the database the command line of c names: its --db, else
// copy's --from (what a copy reads); "" when it names none.
func commandDB(c *cli.Context) string {
	for _, name := range []string{"db", "from"} {
		if v := c.String(name); v != "" {
			return v
		}
	}
	return ""
}
