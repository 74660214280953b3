package report

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestWriteFlat_NestedKeyOrder: a nested object is written as stored
// only when its keys are in encoding/json's order, which compares the
// decoded keys: "total" before "total cost" (the closing quote sorts
// after the space), and a key with an escape decodes to other bytes.
func TestWriteFlat_NestedKeyOrder(t *testing.T) {
	src := func(fn func(FlatItem) error) error {
		return fn(FlatItem{Record: recordOf("k1", "t", nil), Status: "done",
			Outputs: map[string]json.RawMessage{"classify": json.RawMessage(`{"n":{"total cost":1,"total":2},"m":{"a\n":1,"a!":2}}`)}})
	}
	for _, format := range []string{FormatJSONL, FormatCSV} {
		o := FlatOptions{Format: format, Stages: []string{"classify"}}
		var got, want bytes.Buffer
		if err := WriteFlat(&got, src, o); err != nil {
			t.Fatal(err)
		}
		if err := refWriteFlat(&want, src, o); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s differs from before:\n got %s\nwant %s", format, got.String(), want.String())
		}
	}
}
