package pgtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestStart_CreatesUsableDatabases(t *testing.T) {
	s, err := Start()
	if errors.Is(err, ErrUnavailable) && !Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	a, err := s.NewDB("Test One")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.NewDB("Test One")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two databases share a URL: %s", a)
	}
	out, err := s.command("psql", a, "-tAc", "SELECT 40+2").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("query on %s: %v %q", a, err, out)
	}
	if _, err := exec.LookPath(filepath.Join(s.binDir, "postgres")); err != nil {
		t.Fatal(err)
	}
}

// TestStop_EndsThePostmaster: after Stop no process serves the cluster's
// directory any more (under root the started process is runuser, which
// does not pass a signal on to the server).
func TestStop_EndsThePostmaster(t *testing.T) {
	s, err := Start()
	if errors.Is(err, ErrUnavailable) && !Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	s.Stop()
	// Stop returns once the started process has exited, and runuser only
	// exits after the server it started: the postmaster is gone by now.
	if err := syscall.Kill(pid, 0); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("postmaster %d still running after Stop", pid)
	}
}

// TestNewDB_LongPrefixes: names longer than PostgreSQL's 63-byte
// identifiers still make distinct databases.
func TestNewDB_LongPrefixes(t *testing.T) {
	s, err := Start()
	if errors.Is(err, ErrUnavailable) && !Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	long := strings.Repeat("TestDB_Contract/StaleTransitionsIgnored/after_an_edited_re-ingest", 2)
	for i := 0; i < 3; i++ {
		if _, err := s.NewDB(long); err != nil {
			t.Fatalf("database %d with a long prefix: %v", i+1, err)
		}
	}
}
