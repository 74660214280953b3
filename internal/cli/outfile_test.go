package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
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
	t.Run("a directory is refused", func(t *testing.T) {
		if err := writeFileAtomic(dir, writeText("x")); err == nil {
			t.Error("writing over a directory succeeded")
		}
	})
}
