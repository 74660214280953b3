package postgres

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// perLetter is the store as an export saw it before
// ForEachDeadLocation: a Locate per dead letter (its pipeline.Database
// hides the method), the field names still read first.
type perLetter struct {
	pipeline.Database
	db *DB
}

func (p perLetter) FieldNames() (map[string]bool, map[string]map[string]bool, error) {
	return p.db.FieldNames()
}

// pagedLetters counts the walks of ForEachDeadLocation, to show the
// export took that path.
type pagedLetters struct {
	*DB
	walks *int
}

func (p pagedLetters) ForEachDeadLocation(stage string, fn func(pipeline.Location) error) error {
	*p.walks++
	return p.DB.ForEachDeadLocation(stage, fn)
}

// TestDB_ExportDeadLettersSameAsPerLetter: report's exports of a
// pipeline with dead letters at every stage, across pages, are byte
// for byte those of a Locate per letter, in every format, of every item
// and of one stage.
func TestDB_ExportDeadLettersSameAsPerLetter(t *testing.T) {
	defer func(n int) { pageSize = n }(pageSize)
	pageSize = 3
	db, _ := openNew(t, Options{})
	deadEverywhere(t, db, map[string][]string{
		"sanitize":  letterIDs("s", 4),
		"classify":  letterIDs("c", 7),
		"aggregate": letterIDs("a", 3),
	})
	for _, format := range []string{report.FormatJSONL, report.FormatCSV, report.FormatTSV} {
		for _, o := range []report.ExportOptions{{}, {RawCells: true}, {Stage: "classify"}} {
			o.Format = format
			t.Run(fmt.Sprintf("%s stage %q raw %v", format, o.Stage, o.RawCells), func(t *testing.T) {
				var want, got bytes.Buffer
				if err := report.Export(&want, perLetter{Database: db, db: db}, o); err != nil {
					t.Fatalf("a Locate per letter: %v", err)
				}
				walks := 0
				if err := report.Export(&got, pagedLetters{DB: db, walks: &walks}, o); err != nil {
					t.Fatalf("paged letters: %v", err)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Errorf("paged letters:\n%s\na Locate per letter:\n%s", got.String(), want.String())
				}
				if o.Stage == "" && (walks != len(storetest.Stages) || strings.Count(got.String(), "dead at ") != 14) {
					t.Errorf("%d walks of the letters, %d dead rows; want one a stage, 14 rows", walks, strings.Count(got.String(), "dead at "))
				}
			})
		}
	}
}
