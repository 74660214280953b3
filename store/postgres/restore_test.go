package postgres

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestDB_RestoreKeepsOutputsOfInvalidUTF8Texts: an item restored with a
// text that is not valid UTF-8 (its record stored as JSON, the bad
// bytes replaced) keeps its outputs byte for byte: one that repeats the
// text as json.Marshal escapes it (\ufffd) is not stored marked or
// packed against the text given, which the stored record no longer
// holds, and one that repeats the text as the record reads back still
// may be.
func TestDB_RestoreKeepsOutputsOfInvalidUTF8Texts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output func(text, readBack string) []byte
	}{
		{"escaped as json.Marshal writes bad bytes", func(text, _ string) []byte { return sanitizeOut(t, text, text, true) }},
		{"escaped without HTML escapes", func(text, _ string) []byte { return sanitizeOut(t, text, text, false) }},
		{"the text as the record reads back", func(_, readBack string) []byte { return sanitizeOut(t, readBack, readBack, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := openNew(t, Options{})
			rec := storetest.Record("u1", "bad \xff byte <b>", "app", "4")
			js, err := json.Marshal(rec.Text)
			if err != nil {
				t.Fatal(err)
			}
			var readBack string
			if err := json.Unmarshal(js, &readBack); err != nil {
				t.Fatal(err)
			}
			out := tc.output(rec.Text, readBack)
			loc := pipeline.Location{ID: "u1", Stage: "classify", Status: "queued", Record: rec,
				Output: map[string]json.RawMessage{"sanitize": bytes.Clone(out)}}
			if err := db.Restore([]pipeline.Location{loc}); err != nil {
				t.Fatal(err)
			}
			got, err := db.Locate("u1")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Output["sanitize"], out) {
				t.Errorf("sanitize output after Restore:\n%s\nwant as given:\n%s", got.Output["sanitize"], out)
			}
			if got.Record.Text != readBack {
				t.Errorf("text after Restore: %q, want %q", got.Record.Text, readBack)
			}
			storetest.Invariants(t, db)
		})
	}
}
