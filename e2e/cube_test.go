package e2e

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store"
)

// streamedDB hides the store's cube: report.Load streams every done item.
type streamedDB struct{ *store.DB }

func (streamedDB) StoredCube() (pipeline.StoredCube, bool, error) {
	return pipeline.StoredCube{}, false, nil
}

// checkStoredCube opens the database at path read-only and fails unless
// it keeps a cube, and `report --by app,month` read from it is, as text
// and JSON, the report a pass over every done item gives.
func checkStoredCube(t *testing.T, path string) {
	t.Helper()
	defs := make([]store.StageDef, len(cliStages))
	for i, s := range cliStages {
		defs[i] = store.StageDef{Name: s}
	}
	db, err := store.Open(path, store.Options{Stages: defs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, ok, err := db.StoredCube(); !ok || err != nil {
		t.Fatalf("%s keeps no cube a report can read: %v", path, err)
	}
	render := func(src pipeline.Database) []byte {
		t.Helper()
		d, err := report.Load(src, report.LoadOptions{By: []string{"app", "month"}, Now: func() time.Time { return time.Unix(0, 0) }})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := report.Text(&b, d); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(&b).Encode(d); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	if got, want := render(db), render(streamedDB{db}); !bytes.Equal(got, want) {
		t.Errorf("%s: the report from the stored cube differs from the one streamed from the items", path)
	}
}
