package report

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// streamed hides the store's cube, so Load takes the streaming pass.
type streamed struct{ *store.DB }

func (streamed) StoredCube() (pipeline.StoredCube, bool, error) {
	return pipeline.StoredCube{}, false, nil
}

// countedDone counts the passes over the done items.
type countedDone struct {
	*store.DB
	passes *int
}

func (c countedDone) ForEachDone(fn func(pipeline.Item) error) error {
	*c.passes++
	return c.DB.ForEachDone(fn)
}

// renderAll renders d in every report format.
func renderAll(t *testing.T, d *Data) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, render := range map[string]func(*bytes.Buffer) error{
		"text":     func(b *bytes.Buffer) error { return Text(b, d) },
		"markdown": func(b *bytes.Buffer) error { return Markdown(b, d) },
		"html":     func(b *bytes.Buffer) error { return HTML(b, d) },
		"csv": func(b *bytes.Buffer) error {
			if d.Pivot == nil {
				return nil // CSV is the pivot's alone
			}
			return CSV(b, d)
		},
		"json": func(b *bytes.Buffer) error {
			enc := json.NewEncoder(b)
			enc.SetIndent("", "  ")
			return enc.Encode(d)
		},
	} {
		var b bytes.Buffer
		if err := render(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = b.Bytes()
	}
	return out
}

// checkStoredCube loads db's report with and without its stored cube for
// several pivots and compares every format byte for byte. With
// wantStored, the stored path must not read a single done item.
func checkStoredCube(t *testing.T, db *store.DB, wantStored bool) {
	t.Helper()
	checkStoredCubeOf(t, func(passes *int) pipeline.Database { return countedDone{DB: db, passes: passes} }, streamed{db}, wantStored)
}

// checkStoredCubeOf is checkStoredCube for any store: counted(&n) is the
// store counting its passes over the done items in n, streamed the store
// with its cube hidden.
func checkStoredCubeOf(t *testing.T, counted func(passes *int) pipeline.Database, streamedDB pipeline.Database, wantStored bool) {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
	cases := []struct {
		name string
		opts LoadOptions
	}{
		{"app,month in November", LoadOptions{By: []string{"app", "month"}, Window: Window{From: "2026-11", To: "2026-11"}}},
		{"month,app over two months", LoadOptions{By: []string{"month", "app"}, Window: Window{From: "2026-10", To: "2026-11"}}},
		{"month", LoadOptions{By: []string{"month"}}},
		{"app", LoadOptions{By: []string{"app"}}},
		{"no pivot", LoadOptions{}},
	}
	for _, c := range cases {
		c.opts.Now = now
		passes := 0
		got, err := Load(counted(&passes), c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if wantStored && passes != 0 {
			t.Errorf("%s: the report read the done items %d times; want the stored cube alone", c.name, passes)
		}
		want, err := Load(streamedDB, c.opts)
		if err != nil {
			t.Fatalf("%s: streamed: %v", c.name, err)
		}
		g, w := renderAll(t, got), renderAll(t, want)
		for format := range w {
			if !bytes.Equal(g[format], w[format]) {
				t.Errorf("%s, %s: the stored cube's report differs from the streamed one:\n%s", c.name, format, firstDiff(string(g[format]), string(w[format])))
			}
		}
	}
}

// fractionalReviews are the fixed dataset with ratings a float sum
// rounds differently in different orders (4.9, 3.8, 0.7, ...).
func fractionalReviews() []fixtureReview {
	rs := fixtureReviews()
	for i := range rs {
		rs[i].Rating -= 0.1 * float64(1+i%3)
	}
	return rs
}

// TestLoad_StoredCubeMatchesStreaming: a report read from the cube the
// store keeps in its commits is byte for byte the one streaming every
// done item gives, in every format, and reads no item.
func TestLoad_StoredCubeMatchesStreaming(t *testing.T) {
	for name, reviews := range map[string][]fixtureReview{
		"whole ratings":      fixtureReviews(),
		"fractional ratings": fractionalReviews(),
	} {
		t.Run(name, func(t *testing.T) {
			checkStoredCube(t, fixtureDBOf(t, reviews), true)
		})
	}
}

// TestLoad_StoredCubeAfterEditsRerunsPrunes: the cube stays exact as
// items are edited (folded out, then in again with a new answer), re-run
// from classify, and pruned; a cube that prunes left short of quotes is
// refused (the report streams) until a writable open rebuilds it.
func TestLoad_StoredCubeAfterEditsRerunsPrunes(t *testing.T) {
	reviews := fractionalReviews()
	db := fixtureDBOf(t, reviews)

	// Edit every fourth review: while it waits, it is out of the cube.
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
	checkStoredCube(t, db, true)
	drain(t, db, reviews)
	checkStoredCube(t, db, true)

	// Prune the most confident: the largest cells lose every quoted item.
	confidence := map[string]float64{}
	for _, r := range reviews {
		confidence[r.ID] = r.Confidence
	}
	if _, err := db.Prune(func(id string) bool { return confidence[id] < 0.8 }, false); err != nil {
		t.Fatal(err)
	}
	_, ok, err := db.StoredCube()
	if err != nil {
		t.Fatal(err)
	}
	checkStoredCube(t, db, ok)
	if ok {
		t.Fatal("no cell was left short of quotes: the test no longer covers a stale cube")
	}
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := store.Open(path, store.Options{Stages: []store.StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reopened.Close() })
	db = reopened
	checkStoredCube(t, db, true)

	// Re-run classify with other answers: every item folds out and in.
	for i := range reviews {
		reviews[i].Confidence = float64((i*37)%100) / 100
		reviews[i].Label = []string{"bug", "praise", "pricing", "other"}[(i*5)%4]
	}
	if _, err := db.Rerun("classify"); err != nil {
		t.Fatal(err)
	}
	checkStoredCube(t, db, true)
	drain(t, db, reviews)
	checkStoredCube(t, db, true)

}
