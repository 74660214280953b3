package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// writeFileAtomic writes path through a temporary file in the same
// directory renamed into place, so a reader never sees half a file.
//
// Only a regular file is replaced that way. A path that names a device, a
// pipe or a socket (--out /dev/null, /dev/stdout, a FIFO a script reads)
// is written in place: renaming over it would put a regular file where
// the device was, which for /dev/null breaks every program on the
// machine. A symbolic link is followed, so the link stays and its target
// is replaced. A file that exists keeps its permissions; a new one is
// readable by its owner only (a report holds the reviews' text).
func writeFileAtomic(path string, write func(io.Writer) error) error {
	target, mode, err := outputTarget(path)
	if err != nil {
		return err
	}
	if mode != 0 && !mode.IsRegular() {
		return writeInPlace(target, write)
	}
	// `report --db r.db -o r.db` (or -o through a link to it, or a typo
	// naming another database) replaced the pipeline with its report.
	if db, err := hasBoltHeader(target); err == nil && db && mode != 0 {
		return usagef("--output %s is a database file: writing there would replace it; give another file name (nothing was written)", path)
	}
	perm := fs.FileMode(0o600)
	if mode != 0 {
		perm = mode.Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*")
	if err != nil {
		return noPlaceFor(path, target, err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// outputTarget is the file path resolves to (through symbolic links) and
// its mode; mode is 0 when nothing is there yet.
func outputTarget(path string) (string, fs.FileMode, error) {
	target := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		target = resolved
	} else if errors.Is(err, syscall.ENOTDIR) {
		return "", 0, noPlaceFor(path, path, err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", 0, err
	} else if dest, ok := danglingLink(path); ok {
		target = dest
	}
	fi, err := os.Stat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return target, 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	if fi.IsDir() {
		return "", 0, &fs.PathError{Op: "write", Path: path, Err: errors.New("is a directory")}
	}
	return target, fi.Mode(), nil
}

// writeInPlace writes to a file that is not a regular file, as a shell
// redirection would.
func writeInPlace(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// danglingLink is where the symbolic link at path points when that file
// does not exist yet, followed through further links: the file to create,
// so the link stays a link (replacing it, as a missing target did, broke
// a `latest.html -> reports/this-month.html` the user keeps).
func danglingLink(path string) (string, bool) {
	followed := false
	for range 40 { // the kernel's own limit on links followed
		dest, err := os.Readlink(path)
		if err != nil {
			return path, followed
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(path), dest)
		}
		path, followed = dest, true
	}
	return path, followed
}

// noPlaceFor words a failure to create the temporary file beside target
// by the path the user gave: it named the temporary file
// (".x.txt.3645572177") and said no more than "no such file or directory".
func noPlaceFor(path, target string, err error) error {
	dir := filepath.Dir(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("write %s: the directory %s does not exist: create it first, or give another path", path, dir)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("write %s: %s, or a directory above it, is a file, not a directory: give another path", path, dir)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("write %s: no permission to create a file in %s: give another path", path, dir)
	}
	return fmt.Errorf("write %s: %w", path, err)
}
