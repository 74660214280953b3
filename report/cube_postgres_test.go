package report

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
)

// pg is the throwaway PostgreSQL cluster of this test binary, started by
// the first test that needs one and stopped by TestMain.
var pg pgtest.Shared

// pgFixtureOf is fixtureDBOf on PostgreSQL, in a fresh database; the
// test skips when no server binaries are installed (unless required).
func pgFixtureOf(t *testing.T, reviews []fixtureReview) *postgres.DB {
	t.Helper()
	u := pg.NewDB(t)
	stages := []pipeline.StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}
	db, err := postgres.Open(context.Background(), u, postgres.Options{Stages: stages})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fillFixture(t, db, reviews)
	return db
}

// pgStreamed hides the PostgreSQL store's cube, so Load streams.
type pgStreamed struct{ *postgres.DB }

func (pgStreamed) StoredCube() (pipeline.StoredCube, bool, error) {
	return pipeline.StoredCube{}, false, nil
}

// pgCounted counts the passes over the done items.
type pgCounted struct {
	*postgres.DB
	passes *int
}

func (c pgCounted) ForEachDone(fn func(pipeline.Item) error) error {
	*c.passes++
	return c.DB.ForEachDone(fn)
}

func checkPGCube(t *testing.T, db *postgres.DB) {
	t.Helper()
	checkStoredCubeOf(t, func(passes *int) pipeline.Database { return pgCounted{DB: db, passes: passes} }, pgStreamed{db}, true)
}

// TestLoad_StoredCubeMatchesStreamingOnPostgres: the cube PostgreSQL
// keeps in its commits gives the report streaming gives, byte for byte
// in every format, without reading an item: after the first run, edits
// (folded out while they wait, in again with new answers), a prune of
// every quoted item of the largest cells, and a re-run of classify.
func TestLoad_StoredCubeMatchesStreamingOnPostgres(t *testing.T) {
	for name, reviews := range map[string][]fixtureReview{
		"whole ratings":      fixtureReviews(),
		"fractional ratings": fractionalReviews(),
	} {
		t.Run(name, func(t *testing.T) {
			db := pgFixtureOf(t, reviews)
			checkPGCube(t, db)

			var edited []pipeline.Record
			for i := range reviews {
				if i%4 == 0 {
					reviews[i].Text += " (edited)"
					reviews[i].Confidence = 0.5 + float64(i%7)/20
					edited = append(edited, reviews[i].record())
				}
			}
			if _, err := db.Ingest(edited); err != nil {
				t.Fatal(err)
			}
			checkPGCube(t, db)
			drain(t, db, reviews)
			checkPGCube(t, db)

			confidence := map[string]float64{}
			for _, r := range reviews {
				confidence[r.ID] = r.Confidence
			}
			if _, err := db.Prune(func(id string) bool { return confidence[id] < 0.8 }, false); err != nil {
				t.Fatal(err)
			}
			checkPGCube(t, db)

			for i := range reviews {
				reviews[i].Confidence = float64((i*37)%100) / 100
				reviews[i].Label = []string{"bug", "praise", "pricing", "other"}[(i*5)%4]
			}
			if _, err := db.Rerun("classify"); err != nil {
				t.Fatal(err)
			}
			checkPGCube(t, db)
			drain(t, db, reviews)
			checkPGCube(t, db)
		})
	}
}

// pgFoldedMeanwhile is a PostgreSQL pipeline that a live fleet drains
// between the report's reads: fold runs once, just before the cube is
// read, after the report read the tally and the counts.
type pgFoldedMeanwhile struct {
	pgCounted
	fold *func()
}

func (d pgFoldedMeanwhile) StoredCube() (pipeline.StoredCube, bool, error) {
	if f := *d.fold; f != nil {
		*d.fold = nil
		f()
	}
	return d.DB.StoredCube()
}

// TestLoad_StoredCubeDuringALiveDrain: items folded between the report's
// reads of the tally and of the cube do not send it streaming: the cube
// is checked against the tally and done count of its own snapshot, and
// the report shows that tally and those counts ("N done"), byte for
// byte what streaming the same state gives.
func TestLoad_StoredCubeDuringALiveDrain(t *testing.T) {
	reviews := fixtureReviews()
	db := pgFixtureOf(t, reviews)
	var edited []pipeline.Record
	for i := range reviews {
		if i%3 == 0 {
			reviews[i].Text += " (edited)"
			edited = append(edited, reviews[i].record())
		}
	}
	if _, err := db.Ingest(edited); err != nil {
		t.Fatal(err)
	}
	passes := 0
	fold := func() { drain(t, db, reviews) }
	opts := LoadOptions{By: []string{"app", "month"}, Now: func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }}
	got, err := Load(pgFoldedMeanwhile{pgCounted{DB: db, passes: &passes}, &fold}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if passes != 0 {
		t.Errorf("the report read the done items %d times; want the stored cube alone", passes)
	}
	if got.Tally.Items != int64(len(reviews)) {
		t.Errorf("the report's tally counts %d items; want the %d of the cube's state", got.Tally.Items, len(reviews))
	}
	want, err := Load(pgStreamed{db}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got.Counts.Done != len(reviews) {
		t.Errorf("the report says %d done; want the %d of the cube's state (the fold came after Load read the counts)", got.Counts.Done, len(reviews))
	}
	for name, part := range map[string]func(d *Data) any{
		"counts": func(d *Data) any { return d.Counts },
		"tally":  func(d *Data) any { return d.Tally },
		"pivot":  func(d *Data) any { return d.Pivot },
		"cube":   func(d *Data) any { return d.Cube },
	} {
		g, err := json.Marshal(part(got))
		if err != nil {
			t.Fatal(err)
		}
		w, _ := json.Marshal(part(want))
		if !bytes.Equal(g, w) {
			t.Errorf("the %s differs from the streamed one:\n%s", name, firstDiff(string(g), string(w)))
		}
	}
}
