package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --batch-* flags on a run that goes online are refused before anything
// is opened: `run --db F --batch-poll 1m` on a database a batch run
// started went online (--mode's default) at twice the batch price, its
// batch flag setting nothing. With --mode batch or auto they are taken.
func TestRun_batchFlagsOnlineRefused(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GEMINI_API_KEY", "test-key")
	for _, tc := range []struct {
		name string
		args []string
		want string // "" when not refused for it
	}{
		{"no --mode", []string{"--batch-poll", "1m"}, "--batch-poll: batch settings, but this run calls the API online (--mode online, the default): give --mode batch or --mode auto"},
		{"--mode online", []string{"--mode", "online", "--batch-size", "10", "--batch-deadline", "1h"}, "--batch-size, --batch-deadline: batch settings, but this run calls the API online (--mode online):"},
		{"--mode batch", []string{"--mode", "batch", "--batch-poll", "1m"}, ""},
		{"--mode auto", []string{"--mode", "auto", "--batch-size", "10"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "run.db")
			err := runCanceled(append([]string{"sawtooth", "run", "--db", db, "--input", input}, tc.args...))
			if tc.want == "" {
				if err != nil && strings.Contains(err.Error(), "batch settings") {
					t.Fatalf("run %v: %v", tc.args, err)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run %v: %v, want a usage error saying %q", tc.args, err, tc.want)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("the refused run left %s (%v)", db, err)
			}
		})
	}
}

// A later run from flags naming the pipeline but not --mode, on a
// database a batch run from flags started, is refused before anything is
// paid: it went online (--mode's default) at twice the batch price. With
// --mode it runs as asked.
func TestRun_laterFlagsKeepTheStoredBatchMode(t *testing.T) {
	db, url := batchRunDB(t)
	var out, errs syncBuffer
	err := runApp([]string{"sawtooth", "run", "--db", db, "--base-url", url, "--quiet", "--rpm", "100"}, &out, &errs)
	var ue *UsageError
	if want := db + " runs classify with --mode batch"; !errors.As(err, &ue) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "give --mode batch to keep it, or --mode online to switch") {
		t.Fatalf("run --rpm 100 on a batch database: %v, want a usage error saying %q", err, want)
	}
	if shown := shownJob(t, db); !strings.Contains(shown, "mode: batch") {
		t.Errorf("the refused run changed the stored mode:\n%s", shown)
	}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--base-url", url, "--quiet", "--rpm", "100", "--mode", "online"}, &out, &errs); err != nil {
		t.Fatalf("run --rpm 100 --mode online: %v\n%s", err, errs.String())
	}
}
