package ingest

import (
	"context"
	"reflect"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestLoad_fieldTypes(t *testing.T) {
	num, boolean := pipeline.FieldNumber, pipeline.FieldBool
	tests := []struct {
		name, file, content string
		// types is each record's Types, by id.
		types       map[string]map[string]pipeline.FieldType
		fields      []string
		numberCols  []string
		sampleTypes map[string]pipeline.FieldType
	}{
		{
			name: "JSON numbers and bools keep their type, a quoted number stays text",
			file: "in.jsonl",
			content: `{"id":"a","text":"x","rating":2,"score":4.5,"ok":true,"code":"5","tags":[1]}` + "\n" +
				`{"id":"b","text":"y","rating":"2","app":"z"}` + "\n",
			types: map[string]map[string]pipeline.FieldType{
				"a": {"rating": num, "score": num, "ok": boolean},
				"b": nil,
			},
			fields:      []string{"app", "code", "ok", "rating", "score", "tags"},
			sampleTypes: map[string]pipeline.FieldType{"rating": num, "score": num, "ok": boolean},
		},
		{
			name: "a CSV column of numbers only (empty cells aside) is numeric",
			file: "in.csv",
			content: "id,text,rating,zip,mixed,price\n" +
				"a,x,2,007,1,-1.5e3\n" +
				"b,y,,01234,n/a,0.25\n" +
				"c,z,5,10001,3,7\n",
			types: map[string]map[string]pipeline.FieldType{
				"a": {"rating": num, "price": num},
				"b": {"price": num},
				"c": {"rating": num, "price": num},
			},
			fields:      []string{"mixed", "price", "rating", "zip"},
			numberCols:  []string{"price", "rating"},
			sampleTypes: map[string]pipeline.FieldType{"rating": num, "price": num},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeInput(t, tt.file, tt.content)
			format, err := DetectFormat(path)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Check(context.Background(), path, Options{Format: format})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Sample(); got == nil || !reflect.DeepEqual(got.Types, tt.sampleTypes) {
				t.Errorf("Sample() = %+v, want types %v", got, tt.sampleTypes)
			}
			var recs []pipeline.Record
			res, err := p.Apply(context.Background(), 0, collect(&recs))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Fields, tt.fields) || !reflect.DeepEqual(res.NumberColumns, tt.numberCols) {
				t.Errorf("Fields %v, NumberColumns %v; want %v, %v", res.Fields, res.NumberColumns, tt.fields, tt.numberCols)
			}
			for _, r := range recs {
				if want := tt.types[r.ID]; !reflect.DeepEqual(r.Types, want) {
					t.Errorf("item %s: Types %v, want %v (fields %v)", r.ID, r.Types, want, r.Fields)
				}
			}
			// The text is kept as written, whatever the type.
			if recs[0].Fields["rating"] != "2" {
				t.Errorf("rating text %q, want 2", recs[0].Fields["rating"])
			}
		})
	}
}
