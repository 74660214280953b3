package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/storecopy"
	"github.com/urfave/cli/v2"
)

// newCopyCommand is `sawtooth copy`: move a pipeline between a bbolt file
// and PostgreSQL (either way), every item's state intact.
func newCopyCommand() *cli.Command {
	return &cli.Command{
		Name:      "copy",
		Usage:     "copy a pipeline between stores (a bbolt file and a PostgreSQL database, either way): every item's place, outputs, dead letters and history, the aggregate, usage, runs and learned limits",
		UsageText: "sawtooth copy --from reviews.db --to postgres://USER@HOST/DBNAME\n   sawtooth copy --from postgres://USER@HOST/DBNAME --to reviews.db",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Category: catDB, Usage: "the pipeline to copy: a bbolt `FILE` or a postgres URL (stop its workers first)"},
			&cli.StringFlag{Name: "to", Category: catDB, Usage: "where to copy it: a new bbolt `FILE` or a PostgreSQL database holding no pipeline yet"},
		},
		Before: before("from", "to"),
		Action: func(c *cli.Context) error {
			return runCopy(c.String("from"), c.String("to"), c.App.Writer, c.App.ErrWriter)
		},
	}
}

func runCopy(from, to string, out, errOut io.Writer) error {
	if from == to {
		return usagef("--from and --to are both %s: copy into another database", from)
	}
	if err := checkDBFlag("--from", from, true); err != nil {
		return err
	}
	if !isPostgres(to) {
		if fi, err := os.Stat(to); err == nil && fi.Size() > 0 {
			return usagef("--to %s already exists: copy into a new file (or into an empty PostgreSQL database)", to)
		}
		// The copy is renamed onto --to, which would replace a link
		// (and what it points to would never be written) or an empty
		// file the user made; opened in place, the store refused both.
		if fi, err := os.Lstat(to); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			dest, _ := os.Readlink(to)
			return usagef("--to %s is a symbolic link (to %s): the copy would replace it; give the path it points to, or another new file", to, dest)
		} else if err == nil && fi.Mode().IsRegular() {
			return usagef("--to %s is an empty file: remove it, or copy into another new file", to)
		}
		if err := checkDBFlag("--to", to, false); err != nil {
			return err
		}
	} else if err := checkPostgresDSN(to); err != nil {
		return err
	}
	src, err := openReadOnlyFrom(from, "--from")
	if err != nil {
		return err
	}
	defer src.Close()
	defs, err := src.StoredDefinition()
	if err != nil {
		return err
	}
	if isPostgres(to) {
		return copyToPostgres(src, to, defs, out, errOut)
	}
	// A bbolt copy is written beside its place and renamed into it once
	// complete: killed halfway, it left a database of the items copied so
	// far that status and verify called consistent and run resumed, the
	// rest of the pipeline missing.
	open := filepath.Join(filepath.Dir(to), "."+filepath.Base(to)+".copying")
	if err := removeUnfinished(open, to); err != nil {
		return err
	}
	defer os.Remove(open)
	dst, err := openDatabase(open, dbOpen{Stages: defs, Flag: "--to"}, func() (*store.DB, error) {
		return store.Open(open, store.Options{Stages: defs})
	})
	if err != nil {
		return err
	}
	defer dst.Close()
	st, err := storecopy.Copy(src, dst, copyProgress(errOut))
	if err != nil {
		// The deferred Remove drops the unfinished file.
		return fmt.Errorf("copy %s to %s: %w (nothing was written to %s)", src.Path(), to, copyHint(err), to)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("copy %s to %s: %w (nothing was written to %s)", src.Path(), to, err, to)
	}
	if err := place(open, to); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src.Path(), to, err)
	}
	copied(out, st, src.Path(), to)
	return nil
}

// copyProgress says every ten thousand items copied.
func copyProgress(errOut io.Writer) func(n int) {
	return func(n int) {
		if n%10000 == 0 {
			fmt.Fprintf(errOut, "copied %d items\n", n)
		}
	}
}

// copied says what a finished copy moved.
func copied(out io.Writer, st storecopy.Stats, from, to string) {
	fmt.Fprintf(out, "copied %s from %s to %s: %d queued, %d dead, %d done; %s, %s, %s; counts, aggregate, usage and money ledger match\n",
		plural(st.Items, "item"), from, to, st.Queued, st.Dead, st.Done, plural(st.History, "past dead letter"), plural(st.Runs, "run record"), plural(st.Answers, "cached answer"))
}

// unfinishedWait is how long removeUnfinished waits for the lock of an
// unfinished copy: a copy under way holds it from start to end.
const unfinishedWait = 100 * time.Millisecond

// removeUnfinished removes the file a killed copy to --to left at open
// (and its pid file), and refuses when a copy still writes it: unlinked
// under that copy, its file went on being written unseen, and its
// closing rename moved this copy's half-written file onto --to.
func removeUnfinished(open, to string) error {
	if _, err := os.Stat(open); err == nil {
		// A read-only open waits for the writer's lock; a killed
		// copy's file (complete or not) holds none.
		if _, err := store.ReadDefinition(open, unfinishedWait); errors.Is(err, store.ErrInUse) {
			pid := ""
			if b, rerr := os.ReadFile(open + ".pid"); rerr == nil {
				pid = " (pid " + strings.TrimSpace(string(b)) + ")"
			}
			return &wordedError{err: err, msg: fmt.Sprintf("--to %s: another sawtooth copy to it is under way%s, writing %s: wait for it to finish, or stop it and copy again", to, pid, open)}
		}
	}
	for _, p := range []string{open, open + ".pid"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("copy: remove the unfinished copy %s: %w", p, err)
		}
	}
	return nil
}

// place moves the finished copy at open to to, never over a file that
// appeared there while it was written (a run started on the new path):
// a hard link fails when to exists, where a rename replaced the run's
// database under it. A file system without hard links gets the rename
// after a last look. The deferred Remove of open drops the copy's name.
func place(open, to string) error {
	err := os.Link(open, to)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if _, lerr := os.Lstat(to); lerr == nil {
			err = fs.ErrExist
		} else if errors.Is(lerr, fs.ErrNotExist) {
			err = os.Rename(open, to)
		}
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return usagef("--to %s was created while the copy ran (by a run started on it?): it is left as it is and nothing was written there; copy again into a new file", to)
	case err != nil:
		return fmt.Errorf("%w (nothing was written to %s)", err, to)
	}
	_ = store.SyncDir(filepath.Dir(to)) // the new name reaches the disk, not only the file's pages
	return nil
}

// copyHint adds to a refusal of storecopy the commands that clear it.
func copyHint(err error) error {
	var two *storecopy.TwoPlacesError
	var open *storecopy.OpenBatchJobsError
	switch {
	case errors.As(err, &two):
		return fmt.Errorf("%w: run `sawtooth verify --db %s`", err, two.Path)
	case errors.As(err, &open):
		return fmt.Errorf("%w (`sawtooth run --db %s --mode batch` collects them; `sawtooth batch cancel --db %s N` cancels job N)", err, open.Path, open.Path)
	}
	return err
}
