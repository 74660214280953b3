package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fixtureVersions are the stage fingerprints of the golden exports.
var fixtureVersions = map[string]string{"sanitize": "5a1e", "classify": "c1a55", "aggregate": "a66"}

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestGolden renders the fixed dataset in every format and compares with
// testdata/golden/fixture.*; `go test ./report -run Golden -update`
// rewrites them after an intended change (review the diff).
func TestGolden(t *testing.T) {
	formats := []struct {
		file   string
		render func(*bytes.Buffer, *Data) error
	}{
		{"fixture.txt", func(b *bytes.Buffer, d *Data) error { return Text(b, d) }},
		{"fixture.md", func(b *bytes.Buffer, d *Data) error { return Markdown(b, d) }},
		{"fixture.html", func(b *bytes.Buffer, d *Data) error { return HTML(b, d) }},
		{"fixture.csv", func(b *bytes.Buffer, d *Data) error { return CSV(b, d) }},
		{"fixture.json", func(b *bytes.Buffer, d *Data) error {
			enc := json.NewEncoder(b)
			enc.SetIndent("", "  ")
			return enc.Encode(d)
		}},
		{"fixture-export.csv", func(b *bytes.Buffer, _ *Data) error {
			return WriteFlat(b, fixtureSource(fixtureReviews()), FlatOptions{Format: FormatCSV, Stages: []string{"sanitize", "classify", "aggregate"}, Versions: fixtureVersions})
		}},
		{"fixture-export.jsonl", func(b *bytes.Buffer, _ *Data) error {
			return WriteFlat(b, fixtureSource(fixtureReviews()), FlatOptions{Format: FormatJSONL, Stages: []string{"sanitize", "classify", "aggregate"}, Versions: fixtureVersions})
		}},
		{"fixture-export-classify.tsv", func(b *bytes.Buffer, _ *Data) error {
			return WriteFlat(b, fixtureSource(fixtureReviews()), FlatOptions{Format: FormatTSV, Stage: "classify"})
		}},
	}
	for _, f := range formats {
		t.Run(f.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := f.render(&b, fixtureData(t)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", f.file)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run `go test ./report -run Golden -update` to create it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("%s differs from the golden file; if the change is intended, run `go test ./report -run Golden -update` and review the diff.\n%s",
					f.file, firstDiff(b.String(), string(want)))
			}
		})
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	gl, wl := bytes.Split([]byte(got), []byte("\n")), bytes.Split([]byte(want), []byte("\n"))
	for i := range max(len(gl), len(wl)) {
		var g, w []byte
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if !bytes.Equal(g, w) {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + string(g) + "\nwant: " + string(w)
		}
	}
	return ""
}
