package ingest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestLoad_lastRowWithoutNewline: a file's last row need not end with a
// line break (spreadsheets and `printf` write files that way); it is a
// row like any other. Every case's last row has no trailing newline, and
// every row, the last one included, is ingested with its fields.
func TestLoad_lastRowWithoutNewline(t *testing.T) {
	tests := []struct {
		name, file, in string
		want           []string // ids, in order
		lastText       string
	}{
		{"CSV", "in.csv", "id,text,app\nr1,first,a\nr2,second,b\nr3,third,c", []string{"r1", "r2", "r3"}, "third"},
		{"CSV with CRLF", "in.csv", "id,text,app\r\nr1,first,a\r\nr2,second,b", []string{"r1", "r2"}, "second"},
		{"CSV, the last field quoted", "in.csv", "id,text,app\nr1,first,a\nr2,\"second, quoted\",b", []string{"r1", "r2"}, "second, quoted"},
		{"CSV, the last field quoted over two lines", "in.csv", "id,text,app\nr1,first,a\nr2,\"line one\nline two\",b", []string{"r1", "r2"}, "line one\nline two"},
		{"CSV, the last field empty", "in.csv", "id,app,text\nr1,a,first\nr2,b,", []string{"r1", "r2"}, ""},
		{"CSV, one row", "in.csv", "id,text\nr1,only", []string{"r1"}, "only"},
		{"TSV", "in.tsv", "id\ttext\tapp\nr1\tfirst\ta\nr2\tsecond\tb", []string{"r1", "r2"}, "second"},
		{"JSONL", "in.jsonl", `{"id":"r1","text":"first","app":"a"}` + "\n" + `{"id":"r2","text":"second","app":"b"}`, []string{"r1", "r2"}, "second"},
		{"JSONL with CRLF", "in.jsonl", `{"id":"r1","text":"first"}` + "\r\n" + `{"id":"r2","text":"second"}`, []string{"r1", "r2"}, "second"},
		{"JSONL, one row", "in.jsonl", `{"id":"r1","text":"only","rating":4}`, []string{"r1"}, "only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.HasSuffix(tt.in, "\n") {
				t.Fatal("the case must not end with a newline")
			}
			path := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(path, []byte(tt.in), 0o600); err != nil {
				t.Fatal(err)
			}
			format, err := DetectFormat(path)
			if err != nil {
				t.Fatal(err)
			}
			var got []pipeline.Record
			res, err := Load(context.Background(), path, Options{Format: format}, 2, func(recs []pipeline.Record) error {
				got = append(got, recs...)
				return nil
			})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Fatalf("ingested %q, want %q (problems: %v)", ids(got), tt.want, res.Problems)
			}
			if res.Records != len(tt.want) || res.Lines < len(tt.want) || res.BadLines != 0 {
				t.Errorf("result: %d records, %d lines, %d bad; want %d records, none bad", res.Records, res.Lines, res.BadLines, len(tt.want))
			}
			if last := got[len(got)-1]; last.Text != tt.lastText {
				t.Errorf("last row's text = %q, want %q", last.Text, tt.lastText)
			}
			if strings.Contains(tt.in, "app") {
				if last := got[len(got)-1]; last.Fields["app"] == "" {
					t.Errorf("last row lost its app field: %v", last.Fields)
				}
			}
		})
	}
}
