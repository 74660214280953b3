package report

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
)

// pg is the throwaway PostgreSQL cluster of this test binary, started by
// the first test that needs one and stopped by TestMain.
var pg struct {
	once   sync.Once
	server *pgtest.Server
	err    error
}

// pgFixtureOf is fixtureDBOf on PostgreSQL, in a fresh database; the
// test skips when no server binaries are installed (unless required).
func pgFixtureOf(t *testing.T, reviews []fixtureReview) *postgres.DB {
	t.Helper()
	pg.once.Do(func() { pg.server, pg.err = pgtest.Start() })
	if pg.server == nil {
		if pgtest.Required() || !errors.Is(pg.err, pgtest.ErrUnavailable) {
			t.Fatal(pg.err)
		}
		t.Skip(pg.err)
	}
	u, err := pg.server.NewDB(t.Name())
	if err != nil {
		t.Fatal(err)
	}
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
