package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func testFieldEdits(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "1"), Record("b", "bug b", "x", "1"))
	Finish(t, db)
	ingest(t, db, Record("q", "bug q", "x", "1")) // stays queued at sanitize
	qSeq := seqOf(t, db, "sanitize", "q")

	tests := []struct {
		name      string
		rec       pipeline.Record
		want      pipeline.IngestStats
		wantStage string // "" = done
		kept      []string
	}{
		{"a field no stage reads", withField(Record("a", "bug a", "x", "1"), "note", "changed"), pipeline.IngestStats{Updated: 1}, "", nil},
		{"the app, read only by the aggregate", Record("a", "bug a", "y", "1"), pipeline.IngestStats{Changed: 1}, "aggregate", []string{"sanitize", "classify"}},
		{"the rating, field name in another case", withField(Record("b", "bug b", "x", ""), "Rating", "5"), pipeline.IngestStats{Changed: 1}, "aggregate", []string{"sanitize", "classify"}},
		{"the text", Record("b", "ux b", "x", "1"), pipeline.IngestStats{Changed: 1}, "sanitize", nil},
		{"the app of an item not yet aggregated", Record("q", "bug q", "z", "1"), pipeline.IngestStats{Updated: 1}, "sanitize", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if st := ingest(t, db, tc.rec); st != tc.want {
				t.Fatalf("ingest = %+v, want %+v", st, tc.want)
			}
			loc := locate(t, db, tc.rec.ID)
			if tc.wantStage == "" && loc.Status != "done" || tc.wantStage != "" && (loc.Status != "queued" || loc.Stage != tc.wantStage) {
				t.Fatalf("item %q is %s at %s, want queued at %q (\"\" = done)", tc.rec.ID, loc.Status, loc.Stage, tc.wantStage)
			}
			if !equalRecords(loc.Record, tc.rec) {
				t.Fatalf("stored record %+v, want %+v", loc.Record, tc.rec)
			}
			for _, s := range tc.kept {
				if loc.Output[s] == nil {
					t.Errorf("output of %s was dropped", s)
				}
			}
			if st := ingest(t, db, tc.rec); st != (pipeline.IngestStats{Unchanged: 1}) {
				t.Fatalf("the same edit again = %+v", st)
			}
			Invariants(t, db)
		})
	}
	if got := seqOf(t, db, "sanitize", "q"); got != qSeq {
		t.Errorf("an edit nothing had read yet re-queued q (seq %d -> %d)", qSeq, got)
	}
	Finish(t, db)
	tally, _ := db.Tally()
	if tally.Groups["app"]["y"]["bug"] != 1 || tally.Groups["app"]["z"]["bug"] != 1 || tally.Labels["ux"] != 1 {
		t.Fatalf("the tally does not follow the edits: %+v", tally.Groups)
	}
}

// testInvalidUTF8Edit: an item whose text is not valid UTF-8 (its record
// goes through JSON, which replaces the bad bytes) whose rating alone is
// edited keeps its outputs and its place, as one with a valid text does:
// the text an edit is compared with is the one its stages read, the
// stored record's, not the given one, which never equals it.
func testInvalidUTF8Edit(t *testing.T, db pipeline.Database) {
	for i, text := range []string{"good byte", "bad \xff byte"} {
		t.Run(text, func(t *testing.T) {
			id := fmt.Sprintf("u%d", i)
			ingest(t, db, Record(id, text, "x", "4"))
			Advance(t, db, "sanitize")
			before := wantAt(t, db, id, "classify", "queued")
			if st := ingest(t, db, Record(id, text, "x", "5")); st.Updated != 1 || st.Changed != 0 {
				t.Errorf("a rating-only edit: %+v, want 1 updated (no work redone)", st)
			}
			got := locate(t, db, id)
			if got.Status != "queued" || got.Stage != "classify" || !bytes.Equal(got.Output["sanitize"], before.Output["sanitize"]) {
				t.Errorf("after a rating-only edit: %s at %s, sanitize output %s; want queued at classify, the output kept (%s)",
					got.Status, got.Stage, got.Output["sanitize"], before.Output["sanitize"])
			}
			if st := ingest(t, db, Record(id, text, "x", "5")); st != (pipeline.IngestStats{Unchanged: 1}) {
				t.Errorf("the same record again: %+v; want 1 unchanged", st)
			}
			Invariants(t, db)
		})
	}
}

func withField(r pipeline.Record, k, v string) pipeline.Record {
	r.Fields[k] = v
	return r
}

func equalRecords(a, b pipeline.Record) bool {
	return a.ID == b.ID && a.Text == b.Text && string(mustJSON(a.Fields)) == string(mustJSON(b.Fields))
}

func testRequeue(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""), Record("b", "bug b", "x", ""), Record("c", "bug c", "x", ""))
	Advance(t, db, "sanitize")
	Advance(t, db, "classify", "a", "b", "c")
	var nd *pipeline.NotDeadError
	if _, err := db.Requeue("classify", []string{"zzz"}); !errors.As(err, &nd) || nd.ID != "zzz" || nd.Stage != "classify" || !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("requeue of an id with no dead letter: %v, want a NotDeadError naming zzz and classify", err)
	}
	if _, err := db.Requeue("nope", nil); err == nil {
		t.Fatal("requeue at an unknown stage succeeded")
	}
	if n, err := db.Requeue("classify", []string{"b"}); err != nil || n != 1 {
		t.Fatalf("Requeue(b) = %d, %v", n, err)
	}
	if _, err := db.Requeue("classify", []string{"b"}); err == nil {
		t.Fatal("a second requeue of b succeeded")
	}
	wantAt(t, db, "b", "classify", "queued")
	if n, err := db.Requeue("classify", nil); err != nil || n != 2 {
		t.Fatalf("Requeue(all) = %d, %v", n, err)
	}
	if n, err := db.Requeue("classify", nil); err != nil || n != 0 {
		t.Fatalf("Requeue(all) again = %d, %v", n, err)
	}
	Invariants(t, db)
	Finish(t, db)
	if c, _ := db.Counts(); c.Done != 3 {
		t.Fatalf("done = %d", c.Done)
	}
}

func testRerun(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "2"), Record("b", "ux b", "x", ""), Record("c", "bug c", "x", ""), Record("d", "bug d", "x", ""))
	Advance(t, db, "sanitize", "d") // d dead before classify: untouched
	Advance(t, db, "classify")
	Advance(t, db, "aggregate", "c") // c dead at aggregate: re-run
	if _, err := db.Rerun("nope"); err == nil {
		t.Fatal("rerun of an unknown stage succeeded")
	}
	n, err := db.Rerun("classify")
	if err != nil || n != 3 {
		t.Fatalf("Rerun(classify) = %d, %v", n, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		loc := wantAt(t, db, id, "classify", "queued")
		if loc.Output["sanitize"] == nil || loc.Output["classify"] != nil || loc.Output["aggregate"] != nil {
			t.Fatalf("%s outputs after rerun: %v", id, loc.Output)
		}
	}
	wantAt(t, db, "d", "sanitize", "dead")
	if tally, _ := db.Tally(); tally.Items != 0 || len(tally.Labels) != 0 || len(tally.Ratings) != 0 {
		t.Fatalf("tally after rerun = %+v", tally)
	}
	if h, _ := db.DeadHistory("c"); len(h) != 1 || h[0].Reason != "rerun" || h[0].Stage != "aggregate" {
		t.Fatalf("c's dead letter was not kept in its history: %+v", h)
	}
	Invariants(t, db)
	Finish(t, db)
	if n, err := db.Rerun("aggregate"); err != nil || n != 3 {
		t.Fatalf("Rerun(aggregate) = %d, %v", n, err)
	}
}

func testHistory(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""))
	Advance(t, db, "sanitize")
	Advance(t, db, "classify", "a")
	db.Requeue("classify", []string{"a"})
	Advance(t, db, "classify", "a")
	if n, err := db.Requeue("classify", nil); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	Advance(t, db, "classify", "a")
	ingest(t, db, Record("a", "bug a, edited", "x", ""))
	h, err := db.DeadHistory("a")
	if err != nil || len(h) != 3 {
		t.Fatalf("history = %+v, %v; want 3 dead letters", h, err)
	}
	for i, want := range []string{"requeue", "requeue", "edited"} {
		if h[i].Reason != want || h[i].Stage != "classify" || h[i].Dead.Message != "no good: a" || h[i].Retired.IsZero() {
			t.Errorf("history[%d] = %+v, want reason %s", i, h[i], want)
		}
	}
	loc := locate(t, db, "a")
	if len(loc.History) != 3 || loc.History[2].Reason != "edited" {
		t.Fatalf("Locate history = %+v", loc.History)
	}
	if _, err := db.DeadHistory("nope"); err == nil {
		t.Error("DeadHistory of an unknown id succeeded")
	}
	ingest(t, db, Record("b", "bug b", "x", ""))
	if h, err := db.DeadHistory("b"); err != nil || len(h) != 0 {
		t.Fatalf("history of b = %+v, %v", h, err)
	}
}

func testPrune(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "1"), Record("b", "bug b", "x", "2"), Record("c", "ux c", "x", "3"), Record("d", "bug d", "y", ""), Record("e", "bug e", "y", ""))
	Advance(t, db, "sanitize")
	Advance(t, db, "classify", "d")
	db.Requeue("classify", []string{"d"})
	Advance(t, db, "classify", "d") // d dead, with a history
	Advance(t, db, "aggregate")
	ingest(t, db, Record("f", "bug f", "z", "")) // queued
	keep := func(id string) bool { return id == "a" || id == "e" }
	before, _ := db.Counts()
	beforeTally, _ := db.Tally()
	if n, err := db.Prune(keep, true); err != nil || n != 4 {
		t.Fatalf("Prune dry run = %d, %v; want 4", n, err)
	}
	if after, _ := db.Counts(); string(mustJSON(after)) != string(mustJSON(before)) {
		t.Fatalf("a dry run changed the counts: %+v -> %+v", before, after)
	}
	if tally, _ := db.Tally(); len(tally.Diff(beforeTally)) != 0 {
		t.Fatal("a dry run changed the tally")
	}
	if n, err := db.Prune(keep, false); err != nil || n != 4 {
		t.Fatalf("Prune = %d, %v; want 4", n, err)
	}
	for _, id := range []string{"b", "c", "d", "f"} {
		if _, err := db.Locate(id); err == nil {
			t.Errorf("pruned %q is still there", id)
		}
	}
	c, _ := db.Counts()
	tally, _ := db.Tally()
	if c.Items != 2 || c.Done != 2 || tally.Items != 2 || tally.Labels["ux"] != 0 || tally.Ratings["bug"].Count != 1 {
		t.Fatalf("after prune: counts %+v, tally %+v", c, tally)
	}
	if n, err := db.Prune(keep, false); err != nil || n != 0 {
		t.Fatalf("Prune again = %d, %v", n, err)
	}
	// A pruned id that comes back is new.
	if st := ingest(t, db, Record("d", "bug d", "y", "")); st.New != 1 {
		t.Fatalf("re-ingest of a pruned id = %+v", st)
	}
	if h, _ := db.DeadHistory("d"); len(h) != 0 {
		t.Fatalf("a pruned item's history survived: %+v", h)
	}
}

// testRatings: sums stay exact, so an average corrected by an edit is
// right and huge ratings do not overflow.
func testRatings(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "3"), Record("b", "bug b", "x", "1e17"),
		Record("h1", "huge h1", "x", "1e308"), Record("h2", "huge h2", "x", "1e308"),
		Record("t1", "tenth t1", "x", "0.1"), Record("t2", "tenth t2", "x", "0.2"))
	Finish(t, db)
	ingest(t, db, Record("b", "bug b", "x", "5"))
	Finish(t, db)
	tally, err := db.Tally()
	if err != nil {
		t.Fatal(err)
	}
	if got := tally.Ratings["bug"]; got.Count != 2 || got.Mean() != 4 {
		t.Errorf("3 and 1e17 corrected to 5: mean %v over %d, want 4 over 2", got.Mean(), got.Count)
	}
	if got := tally.Ratings["huge"]; got.Count != 2 || got.Mean() != 1e308 {
		t.Errorf("1e308 twice: mean %v over %d, want 1e308", got.Mean(), got.Count)
	}
	want, _ := new(big.Int).SetString("300000000", 10) // 0.3 at the fixed scale
	if got := tally.Ratings["tenth"]; got.Scaled == nil || got.Scaled.Cmp(want) != 0 {
		t.Errorf("0.1 + 0.2 = %v (scaled), want exactly %v", got.Scaled, want)
	}
}

// testTallyRandom applies a long deterministic mix of operations and
// checks the invariants (stored tally = recomputed) after each.
func testTallyRandom(t *testing.T, db pipeline.Database) {
	state := uint64(42)
	rnd := func(n int) int { // xorshift: deterministic, no shared source
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		return int(state % uint64(n))
	}
	labels := []string{"bug", "ux", "praise"}
	rec := func() pipeline.Record {
		id := fmt.Sprintf("i%02d", rnd(40))
		return Record(id, labels[rnd(3)]+" "+id, []string{"x", "y"}[rnd(2)], []string{"", "1", "2.5", "1e17"}[rnd(4)])
	}
	for step := range 60 {
		switch op := rnd(7); op {
		case 0, 1:
			ingest(t, db, rec(), rec(), rec())
		case 2:
			var dead []string
			for range 3 {
				dead = append(dead, fmt.Sprintf("i%02d", rnd(40)))
			}
			Advance(t, db, Stages[rnd(3)].Name, dead...)
		case 3:
			Finish(t, db)
		case 4:
			if _, err := db.Rerun(Stages[rnd(3)].Name); err != nil {
				t.Fatal(err)
			}
		case 5:
			if _, err := db.Requeue(Stages[rnd(3)].Name, nil); err != nil {
				t.Fatal(err)
			}
		case 6:
			cut := rnd(40)
			if _, err := db.Prune(func(id string) bool { n, _ := strconv.Atoi(id[1:]); return n != cut }, false); err != nil {
				t.Fatal(err)
			}
		}
		Invariants(t, db)
		if t.Failed() {
			t.Fatalf("invariants broken at step %d", step)
		}
	}
}

func testUsage(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""), Record("b", "bug b", "x", ""))
	Advance(t, db, "sanitize")
	qs := queued(t, db, "classify")
	u := pipeline.Usage{PromptTokens: 100, CandidateTokens: 10, TotalTokens: 110}
	ok := success("classify", qs[0])
	ok.Usage = u
	dl := deadLetter("classify", qs[1], "blocked")
	dl.Usage = pipeline.Usage{PromptTokens: 7, TotalTokens: 7}
	commit(t, db, ok, dl)
	commit(t, db, ok) // already applied: recorded once
	got, err := db.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if want := u.Add(dl.Usage); got["classify"] != want || got["sanitize"] != (pipeline.Usage{}) {
		t.Fatalf("Usage = %+v, want classify %+v", got, want)
	}
}

func testRuns(t *testing.T, db pipeline.Database) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		r := pipeline.RunSummary{ID: fmt.Sprintf("run-%d", i), Started: base.Add(time.Duration(i) * time.Minute), Ended: base.Add(time.Duration(i)*time.Minute + time.Second), Status: "complete"}
		if err := db.SaveRun(r); err != nil {
			t.Fatal(err)
		}
	}
	r := pipeline.RunSummary{ID: "run-1", Status: "stopped", Message: "interrupted"}
	if err := db.SaveRun(r); err != nil {
		t.Fatal(err)
	}
	runs, err := db.Runs(2)
	if err != nil || len(runs) != 2 || runs[0].ID != "run-2" || runs[1].ID != "run-1" || runs[1].Status != "stopped" {
		t.Fatalf("Runs(2) = %+v, %v", runs, err)
	}
	if all, _ := db.Runs(100); len(all) != 3 {
		t.Fatalf("Runs(100) returned %d, want 3 (a replaced record counts once)", len(all))
	}
	db.AppendSamples("run-2", []pipeline.Sample{{At: base.Add(2 * time.Second), Limit: 2}, {At: base.Add(time.Second), Limit: 1}})
	db.AppendSamples("run-2", []pipeline.Sample{{At: base.Add(3 * time.Second), Limit: 3}})
	db.AppendSamples("run-2", nil)
	s, err := db.Samples("run-2")
	if err != nil || len(s) != 3 || s[0].Limit != 1 || s[2].Limit != 3 {
		t.Fatalf("Samples = %+v, %v", s, err)
	}
	if s, err := db.Samples("none"); err != nil || len(s) != 0 {
		t.Fatalf("Samples of an unknown run = %+v, %v", s, err)
	}
}

func testLearnedLimit(t *testing.T, db pipeline.Database) {
	if n := db.LearnedLimit("classify"); n != 0 {
		t.Fatalf("LearnedLimit of a new database = %d", n)
	}
	if err := db.SetLearnedLimit("classify", 17); err != nil {
		t.Fatal(err)
	}
	db.SetLearnedLimit("sanitize", 3)
	if n := db.LearnedLimit("classify"); n != 17 {
		t.Fatalf("LearnedLimit = %d, want 17", n)
	}
}
