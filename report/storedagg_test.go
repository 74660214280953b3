package report

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestStoredAggregate reads the aggregate settings a database recorded,
// in the flags' form and in a job file's form (where the field names
// differ: date/rating, not date_field/rating_field).
func TestStoredAggregate(t *testing.T) {
	flags, err := json.Marshal(&stages.Aggregate{GroupBy: []string{"app"}, DateField: "when", RatingField: "stars"})
	if err != nil {
		t.Fatal(err)
	}
	jobForm, err := json.Marshal(job.Stage{Aggregate: &job.Aggregate{GroupBy: []string{"app"}, Date: "when", Rating: "stars"}})
	if err != nil {
		t.Fatal(err)
	}
	want := stages.Aggregate{GroupBy: []string{"app"}, DateField: "when", RatingField: "stars"}
	for name, config := range map[string][]byte{"flags": flags, "job file": jobForm} {
		t.Run(name, func(t *testing.T) {
			db, err := store.Open(filepath.Join(t.TempDir(), "a.db"), store.Options{Stages: []store.StageDef{
				{Name: "classify"}, {Name: "aggregate", Config: config},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			got, err := storedAggregate(db)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("storedAggregate = %+v, want %+v", *got, want)
			}
		})
	}
}
