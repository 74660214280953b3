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

// TestMissingFields names the --by fields no item of the cube has.
func TestMissingFields(t *testing.T) {
	c := NewCube([]string{"app", "locale", "month"})
	c.Add(Review{ID: "a", Label: "bug", Groups: map[string]string{"app": "X", "month": "2026-11"}})
	c.Add(Review{ID: "b", Label: "ux", Groups: map[string]string{"app": "Y"}})
	tests := []struct {
		name string
		cube *Cube
		by   []string
		want []string
	}{
		{"every field has a value somewhere", c, []string{"app", "month"}, nil},
		{"a field no item has", c, []string{"locale", "app"}, []string{"locale"}},
		{"an empty cube says nothing", NewCube([]string{"locale"}), []string{"locale"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MissingFields(tt.cube, tt.by); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("MissingFields = %v, want %v", got, tt.want)
			}
		})
	}
}
