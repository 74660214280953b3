//go:build unix

package cli

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteFileAtomic_pipeStaysAPipe: `report --out` a FIFO (or
// /dev/null, /dev/stdout) writes into it. Renamed over, /dev/null became
// a regular file of mode 0600 that no other user could write.
func TestWriteFileAtomic_pipeStaysAPipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// The reader opens first without blocking, so the write's open finds
	// it and what is written waits in the pipe's buffer.
	r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := writeFileAtomic(p, writeText("report")); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r); string(b) != "report" {
		t.Errorf("the reader got %q, want \"report\"", b)
	}
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v, %v", fi, err)
	}
}
