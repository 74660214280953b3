package cli

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A metrics address that cannot be listened on is refused before the DB
// is opened: the run does not ingest the new input and then fail.
func TestRun_BusyMetricsAddrChangesNothing(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "m.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 20); err != nil {
		t.Fatal(err)
	}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if _, err := writeFirstLines(input, testReviews(t), 40); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	err = runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet", "--metrics-addr", busy.Addr().String()}, io.Discard, io.Discard)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("err = %v, want a usage error naming --metrics-addr", err)
	}
	after, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the DB changed although the command failed on its arguments")
	}
}
