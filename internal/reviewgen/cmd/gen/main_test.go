package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	var jsonl, csv bytes.Buffer
	if err := reviewgen.Generate(&jsonl, 20, 5); err != nil {
		t.Fatal(err)
	}
	if err := reviewgen.GenerateCSV(&csv, 20, 5); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		file string // output file in dir, "" for stdout
		want []byte
	}{
		{"jsonl file", []string{"-n", "20", "-seed", "5", "-o", filepath.Join(dir, "r.jsonl")}, "r.jsonl", jsonl.Bytes()},
		{"csv by extension", []string{"-n", "20", "-seed", "5", "-o", filepath.Join(dir, "r.csv")}, "r.csv", csv.Bytes()},
		{"csv to stdout", []string{"-n", "20", "-seed", "5", "-format", "csv"}, "", csv.Bytes()},
		{"jsonl to stdout", []string{"-n", "20", "-seed", "5"}, "", jsonl.Bytes()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			if err := run(tt.args, &stdout); err != nil {
				t.Fatal(err)
			}
			got := stdout.Bytes()
			if tt.file != "" {
				var err error
				if got, err = os.ReadFile(filepath.Join(dir, tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("output differs from the library's:\n%.200s", got)
			}
		})
	}
}

func TestRun_usage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"negative n", []string{"-n", "-1"}, "at least 0"},
		{"unknown format", []string{"-format", "xml"}, "use jsonl or csv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}
