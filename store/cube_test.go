package store

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// cubeAnswer is item id's classify answer: a label and a confidence
// with ties, changed by round so reruns move items between cells.
func cubeAnswer(id string, round int) json.RawMessage {
	n := 0
	fmt.Sscanf(strings.TrimLeft(id, "i"), "%d", &n)
	labels := []string{"bug", "praise", "pricing"}
	b, _ := json.Marshal(map[string]any{"label": labels[(n+round)%3], "confidence": float64((n*7+round)%5) / 4})
	return b
}

// cubeFact is the aggregate stage's fact for item id, from the stored
// classify answer and the record's fields.
func cubeFact(t testing.TB, db *DB, id string) json.RawMessage {
	t.Helper()
	loc, err := db.Locate(id)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Label string }
	if err := json.Unmarshal(loc.Output["classify"], &out); err != nil {
		t.Fatal(err)
	}
	f := pipeline.Fact{Label: out.Label, Groups: map[string]string{"app": loc.Record.Fields["app"], "month": loc.Record.Fields["month"]}}
	var r float64
	if _, err := fmt.Sscanf(loc.Record.Fields["rating"], "%g", &r); err == nil {
		f.Rating = &r
	}
	b, _ := json.Marshal(f)
	return b
}

// cubeRecs are n items over two apps and three months, most with a
// fractional rating.
func cubeRecs(n int, suffix string) []pipeline.Record {
	var out []pipeline.Record
	for i := range n {
		f := map[string]string{"app": []string{"a", "b"}[i%2], "month": fmt.Sprintf("2026-%02d", 9+i%3)}
		if i%4 != 0 {
			f["rating"] = fmt.Sprintf("%.1f", 1+float64(i%40)/10)
		}
		out = append(out, pipeline.Record{ID: fmt.Sprintf("i%03d", i), Text: fmt.Sprintf("text %d%s", i, suffix), Fields: f})
	}
	return out
}

// drainCube takes every queued item through the three stages.
func drainCube(t testing.TB, db *DB, round int) {
	t.Helper()
	advance(t, db, "sanitize", func(id string) json.RawMessage { return json.RawMessage(`{"text":"clean"}`) })
	advance(t, db, "classify", func(id string) json.RawMessage { return cubeAnswer(id, round) })
	advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
}

// recountFromDone is the cube recounted from every done item as ForEachDone
// gives it, keyed like the bucket.
func recountFromDone(t testing.TB, db *DB) map[string]pipeline.StoredCell {
	t.Helper()
	cells := map[string]pipeline.StoredCell{}
	err := db.ForEachDone(func(it pipeline.Item) error {
		var f pipeline.Fact
		if err := json.Unmarshal(it.Outputs["aggregate"], &f); err != nil {
			return err
		}
		var out struct{ Confidence float64 }
		_ = json.Unmarshal(it.Outputs["classify"], &out)
		k := string(cubeKey(f.Groups, f.Label))
		c := cells[k]
		c.Groups, c.Label = f.Groups, f.Label
		c.Count++
		if s, ok := f.ScaledRating(); ok {
			c.Rating = c.Rating.Add(s, 1)
		}
		c.Quotes = append(c.Quotes, pipeline.CubeQuote{ID: it.ID, Confidence: out.Confidence, Rating: f.Rating, Text: it.Text})
		cells[k] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, c := range cells {
		slices.SortFunc(c.Quotes, func(a, b pipeline.CubeQuote) int {
			return cmp.Or(cmp.Compare(b.Confidence, a.Confidence), strings.Compare(a.ID, b.ID))
		})
		c.Quotes = c.Quotes[:min(len(c.Quotes), pipeline.CubeQuotes)]
		cells[k] = c
	}
	return cells
}

// checkCube fails unless db's stored cube is the recount of its done
// items: counts, exact rating sums and the quotes with their text.
func checkCube(t testing.TB, db *DB) {
	t.Helper()
	sc, ok, err := db.StoredCube()
	if err != nil || !ok {
		t.Fatalf("StoredCube: ok %v, %v", ok, err)
	}
	want := recountFromDone(t, db)
	got := map[string]pipeline.StoredCell{}
	for _, c := range sc.Cells {
		got[string(cubeKey(c.Groups, c.Label))] = c
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("cell %q missing from the stored cube", k)
		}
	}
	for k, g := range got {
		w, ok := want[k]
		switch {
		case !ok:
			t.Errorf("cell %q (%d items) has no done item", k, g.Count)
		case g.Count != w.Count || !g.Rating.Equal(w.Rating):
			t.Errorf("cell %q: %d items, ratings %v/%d; the recount has %d, %v/%d", k, g.Count, g.Rating.Sum(), g.Rating.Count, w.Count, w.Rating.Sum(), w.Rating.Count)
		case fmt.Sprint(quoteView(g.Quotes)) != fmt.Sprint(quoteView(w.Quotes)):
			t.Errorf("cell %q quotes %v, want %v", k, quoteView(g.Quotes), quoteView(w.Quotes))
		}
	}
}

func quoteView(qs []pipeline.CubeQuote) []string {
	var out []string
	for _, q := range qs {
		r := "-"
		if q.Rating != nil {
			r = fmt.Sprint(*q.Rating)
		}
		out = append(out, fmt.Sprintf("%s %v %s %q", q.ID, q.Confidence, r, q.Text))
	}
	return out
}

// TestCube_KeptExact: the cube folded commit by commit equals a recount
// from the done items after runs, edits (out while waiting, in again),
// reruns, prunes and dead letters re-queued.
func TestCube_KeptExact(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(cubeRecs(300, "")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"first run", func(t *testing.T) { drainCube(t, db, 0) }},
		{"edited items wait", func(t *testing.T) {
			var edited []pipeline.Record
			for i, r := range cubeRecs(300, " (edited)") {
				if i%3 != 2 {
					edited = append(edited, r)
				}
			}
			if _, err := db.Ingest(edited); err != nil {
				t.Fatal(err)
			}
		}},
		{"edited items done", func(t *testing.T) { drainCube(t, db, 1) }},
		{"rerun classify waits", func(t *testing.T) {
			if _, err := db.Rerun("classify"); err != nil {
				t.Fatal(err)
			}
		}},
		{"rerun done", func(t *testing.T) { drainCube(t, db, 2) }},
		{"rerun aggregate", func(t *testing.T) {
			if _, err := db.Rerun("aggregate"); err != nil {
				t.Fatal(err)
			}
			advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
		}},
		{"pruned", func(t *testing.T) {
			if _, err := db.Prune(func(id string) bool { return id[len(id)-1] != '7' }, false); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do(t)
			checkCube(t, db)
		})
	}
}

// TestCube_StaleUntilReopened: removing the quoted items of a large cell
// leaves it short; the cube says it cannot answer (a report streams)
// until a writable open rebuilds it.
func TestCube_StaleUntilReopened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(cubeRecs(90, "")); err != nil {
		t.Fatal(err)
	}
	drainCube(t, db, 0)
	// Drop every item answered with the top two confidences.
	if _, err := db.Prune(func(id string) bool {
		var out struct{ Confidence float64 }
		_ = json.Unmarshal(cubeAnswer(id, 0), &out)
		return out.Confidence < 0.75
	}, false); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := db.StoredCube(); ok || err != nil {
		t.Fatalf("StoredCube after the quoted items went: ok %v, %v; want a stale cube", ok, err)
	}
	db.Close()
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkCube(t, db)
}

// TestCube_BuiltForExistingDatabase: a database written before the cube
// was kept (today's format 1 fixture) gets it on its first writable open,
// and it is kept from then on.
func TestCube_BuiltForExistingDatabase(t *testing.T) {
	path := copyFixture(t)
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sc, ok, err := db.StoredCube()
	if err != nil || !ok || len(sc.Cells) == 0 {
		t.Fatalf("StoredCube: %d cells, ok %v, %v", len(sc.Cells), ok, err)
	}
	checkCube(t, db)
	if _, err := db.Ingest(cubeRecs(10, "")); err != nil {
		t.Fatal(err)
	}
	drainCube(t, db, 0)
	checkCube(t, db)
}

// dropCube removes the cube, as a database written before it was kept.
func dropCube(t *testing.T, path string) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgg)
		var keys [][]byte
		_ = b.ForEach(func(k, _ []byte) error {
			if strings.HasPrefix(string(k), string(cubePrefix)) || string(k) == string(cubeState) {
				keys = append(keys, slices.Clone(k))
			}
			return nil
		})
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCube_Killed kills a real process (this test binary) with SIGKILL
// inside the commit that folds an item into the cube, and inside the
// build of a database's first cube: the reopened file's cube is the
// recount of its done items, and stays so as the run finishes.
func TestCube_Killed(t *testing.T) {
	for _, mode := range []string{"fold", "build"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "st.db")
			db, err := Open(path, Options{Stages: testStages})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Ingest(cubeRecs(40, "")); err != nil {
				t.Fatal(err)
			}
			drainCube(t, db, 0)
			if _, err := db.Ingest(cubeRecs(60, " (edited)")); err != nil {
				t.Fatal(err)
			}
			advance(t, db, "sanitize", func(string) json.RawMessage { return json.RawMessage(`{"text":"clean"}`) })
			advance(t, db, "classify", func(id string) json.RawMessage { return cubeAnswer(id, 1) })
			db.Close()
			if mode == "build" {
				dropCube(t, path)
			}
			killInHook(t, "^TestHelperCube$", path)
			db, err = Open(path, Options{Stages: testStages})
			if err != nil {
				t.Fatalf("open after the kill: %v", err)
			}
			defer db.Close()
			checkCube(t, db)
			advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
			checkCube(t, db)
			if p, err := db.Check(); err != nil || len(p) > 0 {
				t.Errorf("Check: %v %v", p, err)
			}
		})
	}
}

// TestHelperCube is the child of TestCube_Killed: it folds the queued
// items (or builds the cube on open), and the hook stops it mid-commit.
func TestHelperCube(t *testing.T) {
	path := os.Getenv("SAWTOOTH_HELPER_DB")
	if path == "" {
		t.Skip("a helper process of TestCube_Killed")
	}
	folds := 0
	cubeFoldHook = func() {
		if folds++; folds == 10 {
			blockInHook()
		}
	}
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
	t.Fatal("the hook was never reached")
}

// TestCubeCell_Fold: whatever items come and go, a cell's quotes are the
// exact best of its items: a prefix of all of them in quote order.
func TestCubeCell_Fold(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 31))
	for round := range 200 {
		var c cubeCell
		in := map[string]cubeQuote{}
		for step := range 60 {
			id := fmt.Sprintf("i%02d", rng.IntN(30))
			q, ok := in[id]
			d := int64(-1)
			if !ok {
				q, d = cubeQuote{id: id, conf: float64(rng.IntN(4)) / 4}, 1
				in[id] = q
			} else {
				delete(in, id)
			}
			c.fold(q, nil, d)
			all := slices.SortedFunc(maps.Values(in), cubeQuoteBefore)
			if c.count != int64(len(all)) || len(c.quotes) > cubeKeep {
				t.Fatalf("round %d step %d: count %d, %d quotes; want %d items", round, step, c.count, len(c.quotes), len(all))
			}
			if !slices.Equal(c.quotes, all[:len(c.quotes)]) {
				t.Fatalf("round %d step %d: quotes %v are not the best of %v", round, step, c.quotes, all)
			}
		}
	}
}

// BenchmarkDB_CommitAggregate is the commits that fold 10,000 items into
// the tally, with the cube kept and without it (a database whose cube
// was never built folds none), in items per second.
//
//	go test ./store -run '^$' -bench CommitAggregate
func BenchmarkDB_CommitAggregate(b *testing.B) {
	const items, batch = 10_000, 1000
	for _, cube := range []bool{true, false} {
		b.Run(fmt.Sprintf("cube=%v", cube), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				db, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{Stages: testStages, NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := db.Ingest(cubeRecs(items, "")); err != nil {
					b.Fatal(err)
				}
				advance(b, db, "sanitize", func(string) json.RawMessage { return json.RawMessage(`{"text":"clean"}`) })
				advance(b, db, "classify", func(id string) json.RawMessage { return cubeAnswer(id, 0) })
				if !cube {
					if err := db.bolt.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAgg).Delete(cubeState) }); err != nil {
						b.Fatal(err)
					}
				}
				qs, err := db.Queued("aggregate", 0, items)
				if err != nil {
					b.Fatal(err)
				}
				var ts []pipeline.Transition
				for _, q := range qs {
					ts = append(ts, pipeline.Transition{Stage: "aggregate", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
						Result: pipeline.Result{Output: cubeFact(b, db, q.Item.ID)}})
				}
				b.StartTimer()
				for lo := 0; lo < len(ts); lo += batch {
					if err := db.Commit(ts[lo:min(lo+batch, len(ts))]); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				db.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(items)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

// TestCube_ConfidenceNoted: classify outputs stored as references to
// cached answers are noted with their confidence, and the cube's folds
// take it from the note only while the stored reference is the noted
// one: the cube is the recount's, a note whose reference no longer
// matches is read from the file instead, and each fold takes its note.
func TestCube_ConfidenceNoted(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(cubeRecs(300, "")); err != nil {
		t.Fatal(err)
	}
	classify := func(round int) {
		advance(t, db, "sanitize", func(id string) json.RawMessage { return json.RawMessage(`{"text":"clean"}`) })
		commitQueued(t, db, "classify", func(id string) pipeline.Transition {
			out := cubeAnswer(id, round)
			// Keyed by the answer, so items share answers as the cache shares them.
			return pipeline.Transition{Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out}, CacheKey: string(out)}
		})
	}
	classify(0)
	if n := len(db.confs.byID); n != 300 {
		t.Fatalf("%d classify outputs noted, want all 300 (each a reference to a cached answer)", n)
	}
	advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
	checkCube(t, db)
	if n := len(db.confs.byID); n != 0 {
		t.Errorf("%d notes left after every fact was folded, want 0", n)
	}

	// A note is what the fold reads while the reference matches, and is
	// passed over once it does not (an output rewritten since).
	if _, err := db.Rerun("classify"); err != nil {
		t.Fatal(err)
	}
	classify(0)
	taken, stale := "i001", "i002"
	db.confs.byID[taken] = confNote{ref: db.confs.byID[taken].ref, conf: 99}
	db.confs.byID[stale] = confNote{ref: "another output", conf: 99}
	advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
	sc, _, err := db.StoredCube()
	if err != nil {
		t.Fatal(err)
	}
	conf := map[string]float64{}
	for _, c := range sc.Cells {
		for _, q := range c.Quotes {
			conf[q.ID] = q.Confidence
		}
	}
	if conf[taken] != 99 {
		t.Errorf("item %s quoted at confidence %v, want the noted 99", taken, conf[taken])
	}
	if c, ok := conf[stale]; !ok || c == 99 {
		t.Errorf("item %s quoted (%v) at confidence %v, want its own, not that of a note whose reference is not the stored one", stale, ok, c)
	}
}

// TestCube_ConfidenceNotedHealed: an answer damaged on disk and replaced
// by a fresh one (putAnswer heals it) changes what every output
// referring to its key reads; the notes taken before do not outlive it.
// The keys are hashes, as the cache's are, so outputs refer to answers
// by a short prefix.
func TestCube_ConfidenceNotedHealed(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(cubeRecs(2, "")); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", func(string) json.RawMessage { return json.RawMessage(`{"text":"clean"}`) })
	key := strings.Repeat("ab", 32)
	classifyOne := func(id string, out json.RawMessage) {
		t.Helper()
		qs, err := db.Queued("classify", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Item.ID == id {
				if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: id, Seq: q.Seq, Outcome: pipeline.Succeeded,
					Result: pipeline.Result{Output: out}, CacheKey: key}}); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("%s is not queued at classify", id)
	}
	classifyOne("i000", json.RawMessage(`{"label":"bug","confidence":0.9}`))
	if n := len(db.confs.byID); n != 1 {
		t.Fatalf("%d notes after a classify output stored by reference, want 1", n)
	}
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(answersBucket("classify")).Put(answerKey(key), []byte{tagCached, 0xff}) // damaged
	}); err != nil {
		t.Fatal(err)
	}
	classifyOne("i001", json.RawMessage(`{"label":"bug","confidence":0.1}`)) // heals the key: i000 now reads 0.1
	advance(t, db, "aggregate", func(id string) json.RawMessage { return cubeFact(t, db, id) })
	checkCube(t, db)
}
