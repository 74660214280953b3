package cli

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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
	perm := fs.FileMode(0o600)
	if mode != 0 {
		perm = mode.Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*")
	if err != nil {
		return err
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
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", 0, err
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
