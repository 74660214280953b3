package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// pruneDB creates a DB at path holding items r1..r5, waiting at the first
// stage.
func pruneDB(t *testing.T, path string) {
	t.Helper()
	db, err := store.Open(path, store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	var recs []pipeline.Record
	for i := 1; i <= 5; i++ {
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%d", i), Text: fmt.Sprintf("review %d", i)})
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A prune that is refused, asked about or only counted leaves the DB byte
// for byte as it was; with --yes (or a yes on the terminal) it removes
// exactly the items the input no longer holds.
func TestPrune(t *testing.T) {
	const keep3 = `{"id":"r1","text":"review 1"}` + "\n" + `{"id":"r2","text":"review 2"}` + "\n" + `{"id":"r3","text":"review 3"}` + "\n"
	cases := []struct {
		name    string
		input   string // "" for no file at all
		args    []string
		confirm func(string) bool
		// wantErr is part of the error, "" for success; usage says the
		// error is a usage error; wantOut is part of stdout.
		wantErr string
		usage   bool
		wantOut string
		// wantItems is the DB's item count afterwards; 5 means unchanged
		// (the file is also compared byte for byte).
		wantItems int
	}{
		{name: "dry run counts", input: keep3, args: []string{"--dry-run"}, wantOut: "would remove 2 items", wantItems: 5},
		{name: "no --yes and no terminal stops", input: keep3, wantErr: "stopped before removing 2 items", usage: true, wantItems: 5},
		{name: "no on the terminal stops", input: keep3, confirm: func(string) bool { return false }, wantErr: "nothing was changed", usage: true, wantItems: 5},
		{name: "yes on the terminal removes", input: keep3, confirm: func(string) bool { return true }, wantOut: "removed 2 items", wantItems: 3},
		{name: "--yes removes", input: keep3, args: []string{"--yes"}, wantOut: "removed 2 items", wantItems: 3},
		{name: "every id kept", input: keep3 + `{"id":"r4","text":"x"}` + "\n" + `{"id":"r5","text":"y"}` + "\n", args: []string{"--yes"}, wantOut: "nothing to prune", wantItems: 5},
		{name: "a skipped line refuses", input: keep3 + "{not json\n", args: []string{"--yes"}, wantErr: "1 line skipped", wantItems: 5},
		{name: "no record refuses", input: "\n", args: []string{"--yes"}, wantErr: "holds no record", wantItems: 5},
		// Last night's delta file, or ids read from the wrong field: none
		// of the database's items, so --yes removed them all.
		{name: "none of the ids refuses", input: `{"id":"n1","text":"new"}` + "\n", args: []string{"--yes"}, wantErr: "holds none of the 5 items", usage: true, wantItems: 5},
		{name: "missing input is a usage error", args: []string{"--yes"}, wantErr: "no such file", usage: true, wantItems: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, input := filepath.Join(dir, "p.db"), filepath.Join(dir, "items.jsonl")
			pruneDB(t, db)
			if tc.input != "" {
				if err := os.WriteFile(input, []byte(tc.input), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			app := NewApp(Config{Stdout: &stdout, Stderr: &stderr, Confirm: tc.confirm})
			err = app.Run(append([]string{"sawtooth", "prune", "--db", db, "--input", input}, tc.args...))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err = %v\n%s", err, stderr.String())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			var ue *UsageError
			if tc.wantErr != "" && errors.As(err, &ue) != tc.usage {
				t.Errorf("err = %v: usage error %v, want %v", err, !tc.usage, tc.usage)
			}
			if !strings.Contains(stdout.String(), tc.wantOut) {
				t.Errorf("stdout = %q, want %q", stdout.String(), tc.wantOut)
			}
			if tc.wantItems == 5 {
				after, err := os.ReadFile(db)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(before, after) {
					t.Errorf("the DB changed")
				}
			}
			s, err := store.Open(db, store.Options{Stages: namedStages(), ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			counts, err := s.Counts()
			if err != nil {
				t.Fatal(err)
			}
			if counts.Items != tc.wantItems {
				t.Errorf("%d items afterwards, want %d", counts.Items, tc.wantItems)
			}
			if problems, err := s.Check(); err != nil || len(problems) > 0 {
				t.Errorf("Check = %q, %v", problems, err)
			}
			for _, id := range []string{"r1", "r2", "r3"} {
				if _, err := s.Locate(id); err != nil {
					t.Errorf("kept item %s: %v", id, err)
				}
			}
		})
	}
}
