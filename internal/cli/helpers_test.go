package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// syncBuffer is a bytes.Buffer safe for concurrent use: a captured stdout
// or stderr of a command running in another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runApp runs the app on args as the process would, and returns its error.
func runApp(args []string, stdout, stderr io.Writer) error {
	return NewApp(Config{Stdout: stdout, Stderr: stderr}).Run(args)
}

// testReviews is the bundled reviews the demo drains.
func testReviews(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "reviews.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
