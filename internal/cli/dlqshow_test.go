package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dlq show of an id the database does not hold is the user's mistake:
// a usage error naming the id and the database and where the ids are
// listed. It was a bare `item "nope": not found`, exit 1.
func TestDLQShow_unknownIDIsAUsageError(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format2.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, id, want string }{
		{"plain", "nope", `--id "nope": ` + path + " holds no item with this id"},
		{"control characters", "a\x1b[2Jb", `--id "a\x1b[2Jb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runApp([]string{"sawtooth", "dlq", "show", "--db", path, "--id", tc.id}, io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("dlq show --id %q: %v, want a usage error", tc.id, err)
			}
			for _, w := range []string{tc.want, "sawtooth dlq list --db " + path} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q:\n%s", w, err)
				}
			}
		})
	}
}
