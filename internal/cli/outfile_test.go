package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/store"
)

func writeText(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func TestWriteFileAtomic_regularFiles(t *testing.T) {
	dir := t.TempDir()
	t.Run("new file is its owner's only", func(t *testing.T) {
		p := filepath.Join(dir, "new.txt")
		if err := writeFileAtomic(p, writeText("a")); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600", fi.Mode().Perm())
		}
	})
	t.Run("existing file keeps its permissions", func(t *testing.T) {
		p := filepath.Join(dir, "old.txt")
		if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeFileAtomic(p, writeText("new")); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(b) != "new" || fi.Mode().Perm() != 0o644 {
			t.Errorf("got %q mode %v, want \"new\" mode 0644", b, fi.Mode().Perm())
		}
	})
	t.Run("a symbolic link stays a link to the new text", func(t *testing.T) {
		real := filepath.Join(dir, "real.html")
		link := filepath.Join(dir, "latest.html")
		if err := os.WriteFile(real, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, link); err != nil {
			t.Skipf("no symbolic links here: %v", err)
		}
		if err := writeFileAtomic(link, writeText("new")); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(link)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("the link was replaced (%v, %v)", fi, err)
		}
		if b, _ := os.ReadFile(real); string(b) != "new" {
			t.Errorf("target holds %q, want \"new\"", b)
		}
	})
	t.Run("a link to a file not there yet creates it", func(t *testing.T) {
		real := filepath.Join(dir, "month.html")
		link := filepath.Join(dir, "current.html")
		if err := os.Symlink("month.html", link); err != nil {
			t.Skipf("no symbolic links here: %v", err)
		}
		if err := writeFileAtomic(link, writeText("new")); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("the link was replaced (%v, %v)", fi, err)
		}
		if b, _ := os.ReadFile(real); string(b) != "new" {
			t.Errorf("target holds %q, want \"new\"", b)
		}
	})
	t.Run("a directory is refused", func(t *testing.T) {
		if err := writeFileAtomic(dir, writeText("x")); err == nil {
			t.Error("writing over a directory succeeded")
		}
	})
}

// A path with no directory to hold it is refused in words naming the path
// and the directory; it named the temporary file beside it.
func TestWriteFileAtomic_noPlace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"missing directory", filepath.Join(dir, "none", "r.html"), "the directory " + filepath.Join(dir, "none") + " does not exist"},
		{"a file as the directory", filepath.Join(file, "r.html"), file + ", or a directory above it, is a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := writeFileAtomic(tc.path, writeText("x"))
			if err == nil {
				t.Fatal("writing succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "write "+tc.path+":") || strings.Contains(err.Error(), ".r.html.") {
				t.Errorf("error %q, want it to name %s and say %q", err, tc.path, tc.want)
			}
		})
	}
}

// report -o naming the database (itself, through a link, or another
// one by a slip) replaced the pipeline with its report. It is refused
// and the database is left as it was.
func TestWriteFileAtomic_refusesADatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.db")
	db, err := store.Open(path, store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "latest")
	if err := os.Symlink(path, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"sawtooth", "report", "--db", path, "-o", path},
		{"sawtooth", "report", "--db", path, "--format", "html", "-o", link},
	} {
		err := runApp(args, io.Discard, io.Discard)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "is a database file: writing there would replace it") {
			t.Errorf("%v: %v, want a usage error refusing to replace the database", args[2:], err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatalf("%v replaced the database", args[2:])
		}
	}
}
