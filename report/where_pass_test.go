package report

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// generatedDB is a database of n generated reviews (internal/reviewgen)
// standing everywhere an item can: done, dead at sanitize and at
// classify (three reasons), queued at classify, and a few just ingested.
func generatedDB(t *testing.T, n int) *store.DB {
	t.Helper()
	defs := []store.StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}
	db, err := store.Open(filepath.Join(t.TempDir(), "generated.db"), store.Options{Stages: defs, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g := reviewgen.New(7)
	ingest := func(k int) {
		var recs []pipeline.Record
		for range k {
			rv := g.Next()
			recs = append(recs, pipeline.Record{ID: rv.ID, Text: rv.Text, Fields: map[string]string{
				"app": rv.App, "date": rv.Date, "rating": strconv.Itoa(rv.Rating), "locale": rv.Locale, "version": rv.Version,
			}})
		}
		if _, err := db.Ingest(recs); err != nil {
			t.Fatal(err)
		}
	}
	ingest(n)
	labels := []string{"bug", "pricing", "feature", "ux", "praise"}
	agg := &stages.Aggregate{}
	for _, stage := range []string{"sanitize", "classify", "aggregate"} {
		qs, err := db.Queued(stage, 0, n)
		if err != nil {
			t.Fatal(err)
		}
		var ts []pipeline.Transition
		for _, q := range qs {
			i, _ := strconv.Atoi(strings.TrimPrefix(q.Item.ID, "r"))
			tr := pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded}
			switch {
			case stage == "sanitize" && i%41 == 0:
				tr.Outcome = pipeline.DeadLettered
				tr.Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "empty text after sanitizing", Attempts: 1}
			case stage == "sanitize":
				tr.Result.Output, _ = json.Marshal(map[string]string{"text": q.Item.Text})
			case stage == "classify" && i > n-25:
				continue // left queued
			case stage == "classify" && i%29 == 0:
				tr.Outcome = pipeline.DeadLettered
				tr.Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: fmt.Sprintf("blocked: safety %d", i%3), Attempts: 1 + i%2}
			case stage == "classify":
				tr.Result.Output, _ = json.Marshal(map[string]any{"label": labels[(len(q.Item.Text)+i)%5],
					"confidence": float64(50+(len(q.Item.Text)*7+i)%50) / 100, "reason": "generated"})
			default:
				q.Item.Prev = q.Item.Outputs["classify"]
				if tr.Result, err = agg.Process(context.Background(), q.Item); err != nil {
					t.Fatal(err)
				}
			}
			ts = append(ts, tr)
		}
		if err := db.Commit(ts); err != nil {
			t.Fatal(err)
		}
	}
	ingest(6)
	return db
}

// countedWalks counts the store's passes over its items: the done
// items, and every item.
type countedWalks struct {
	*store.DB
	passes *int
}

func (c countedWalks) ForEachDone(fn func(pipeline.Item) error) error {
	*c.passes++
	return c.DB.ForEachDone(fn)
}

func (c countedWalks) ForEachItem(fn func(pipeline.ItemState) error) error {
	*c.passes++
	return c.DB.ForEachItem(fn)
}

// TestLoad_WhereAndOffCubeByReadTheItemsOnce: a report with --where, or
// with a --by field the stored cube does not hold, reads the items in
// one pass, on a store that walks every item and on one that gives its
// done items and dead letters (PostgreSQL), and renders every format
// byte for byte as the two passes did (testdata/golden/where, written
// by the two-pass code; `go test ./report -run ReadTheItemsOnce -update`
// rewrites them after an intended change).
func TestLoad_WhereAndOffCubeByReadTheItemsOnce(t *testing.T) {
	db := generatedDB(t, 400)
	now := func() time.Time { return time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC) }
	jan := Window{From: "2026-01", To: "2026-01"}
	cases := []struct {
		name string
		opts LoadOptions
	}{
		{"where-app", LoadOptions{Where: []Filter{{"app", reviewgen.Apps[1]}}}},
		{"where-label-by-app-month", LoadOptions{By: []string{"app", "month"}, Where: []Filter{{"label", "bug"}}}},
		{"where-month-by-locale", LoadOptions{By: []string{"locale"}, Where: []Filter{{"month", "2025-11"}}}},
		{"where-locale-by-app-locale-jan", LoadOptions{By: []string{"app", "locale"}, Where: []Filter{{"locale", "de"}}, Window: jan}},
		{"where-two-case-by-version", LoadOptions{By: []string{"version"}, Where: []Filter{{"App", reviewgen.Apps[0]}, {"rating", "1"}}}},
		{"where-matching-nothing", LoadOptions{By: []string{"app"}, Where: []Filter{{"locale", "xx"}}}},
		{"by-locale-month", LoadOptions{By: []string{"locale", "month"}}},
		{"by-app-locale-jan", LoadOptions{By: []string{"app", "locale"}, Window: jan}},
	}
	stores := []struct {
		name string
		db   func(passes *int) pipeline.Database
	}{
		{"walk", func(p *int) pipeline.Database { return countedWalks{db, p} }},
		{"done-dead", func(p *int) pipeline.Database { return noWalk{countedWalks{db, p}} }},
	}
	sums := readGoldenSums(t, filepath.Join("testdata", "golden", "where.sha256"))
	for _, st := range stores {
		for _, c := range cases {
			t.Run(st.name+"/"+c.name, func(t *testing.T) {
				c.opts.Now = now
				passes := 0
				d, err := Load(st.db(&passes), c.opts)
				if err != nil {
					t.Fatal(err)
				}
				if passes != 1 {
					t.Errorf("Load read the items in %d passes, want 1", passes)
				}
				d.DB = "generated.db"
				for format, got := range renderAll(t, d) {
					sums.check(t, st.name+"/"+c.name+"."+format, got)
				}
			})
		}
	}
	sums.save(t)
}

// goldenSums are the SHA-256 sums of golden outputs too large to keep
// whole (a report in every format of a few hundred generated items is
// megabytes), by name, read from one file; with -update, check records
// each output's sum and save rewrites the file.
type goldenSums struct {
	path string
	sums map[string]string
}

func readGoldenSums(t *testing.T, path string) *goldenSums {
	t.Helper()
	g := &goldenSums{path: path, sums: map[string]string{}}
	raw, err := os.ReadFile(path)
	if err != nil && !(*update && errors.Is(err, fs.ErrNotExist)) {
		t.Fatalf("%v (run `go test ./report -run ReadTheItemsOnce -update` to create it)", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if sum, name, ok := strings.Cut(line, "  "); ok {
			g.sums[name] = sum
		}
	}
	return g
}

// check compares got's sum with name's; a differing output is kept in
// a temporary directory, to diff against the old code's.
func (g *goldenSums) check(t *testing.T, name string, got []byte) {
	t.Helper()
	sum := fmt.Sprintf("%x", sha256.Sum256(got))
	if *update {
		g.sums[name] = sum
		return
	}
	if g.sums[name] != sum {
		where := "nowhere"
		if dir, err := os.MkdirTemp("", "golden-"); err == nil {
			where = filepath.Join(dir, strings.ReplaceAll(name, "/", "-"))
			if os.WriteFile(where, got, 0o644) != nil {
				where = "nowhere"
			}
		}
		t.Errorf("%s: sum %s, want %s from %s (the output is kept in %s)", name, sum, g.sums[name], g.path, where)
	}
}

func (g *goldenSums) save(t *testing.T) {
	t.Helper()
	if !*update {
		return
	}
	names := slices.Sorted(maps.Keys(g.sums))
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", g.sums[n], n)
	}
	if err := os.WriteFile(g.path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
