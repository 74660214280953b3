package pgtest

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
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
