package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestLoad_WhereFiltersEverySection: with --where, the item counts, the
// labels and group tables (the tally), the dead letters, the cube and
// the pivot all count only the matching items, exactly as a database
// holding only them would; a field no item has is an UnknownFieldError.
func TestLoad_WhereFiltersEverySection(t *testing.T) {
	db := fixtureDB(t)
	now := func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		name  string
		where []Filter
		keep  func(fixtureReview) bool
		dead  int // the dead letter (TaskFlow, 2026-11-03, no label) passes
	}{
		{"an input field", []Filter{{"app", "TaskFlow"}}, func(r fixtureReview) bool { return r.App == "TaskFlow" }, 1},
		{"another app", []Filter{{"app", "NoteNest"}}, func(r fixtureReview) bool { return r.App == "NoteNest" }, 0},
		{"the label", []Filter{{"label", "bug"}}, func(r fixtureReview) bool { return r.Label == "bug" }, 0},
		{"the month, derived from the date", []Filter{{"month", "2026-11"}}, func(r fixtureReview) bool { return r.Date[:7] == "2026-11" }, 1},
		{"two filters", []Filter{{"app", "TaskFlow"}, {"month", "2026-10"}}, func(r fixtureReview) bool { return r.App == "TaskFlow" && r.Date[:7] == "2026-10" }, 0},
		{"a field named in another case", []Filter{{"App", "NoteNest"}}, func(r fixtureReview) bool { return r.App == "NoteNest" }, 0},
	}
	// A store that cannot walk its items (PostgreSQL) gives the same
	// figures from its done items and dead letters.
	stores := []struct {
		name string
		db   pipeline.Database
	}{{"walking every item", db}, {"done and dead", noWalk{db}}}
	for _, st := range stores {
		for _, tt := range tests {
			t.Run(st.name+"/"+tt.name, func(t *testing.T) { checkWhere(t, st.db, tt.where, tt.keep, tt.dead, now) })
		}
	}

	// A queued item is counted where it waits, when it matches.
	if _, err := db.Ingest([]pipeline.Record{{ID: "zz-queued", Text: "new", Fields: map[string]string{"app": "NoteNest", "date": "2026-11-20"}}}); err != nil {
		t.Fatal(err)
	}
	for app, want := range map[string]int{"NoteNest": 1, "TaskFlow": 0} {
		d, err := Load(db, LoadOptions{Where: []Filter{{"app", app}}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if d.queuedTotal() != want || d.Counts.Stages[0].Queued != want {
			t.Errorf("app=%s: queued %d (%+v), want %d at sanitize", app, d.queuedTotal(), d.Counts.Stages, want)
		}
	}
}

// noWalk hides the store's ForEachItem, as a PostgreSQL store has none.
type noWalk struct{ pipeline.Database }

// checkWhere loads the report of db's items passing where and checks
// every section against the reviews keep passes and wantDead dead letters.
func checkWhere(t *testing.T, db pipeline.Database, where []Filter, keep func(fixtureReview) bool, wantDead int, now func() time.Time) {
	t.Helper()
	d, err := Load(db, LoadOptions{By: []string{"app", "month"}, Where: where, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var want pipeline.Tally
	for _, r := range fixtureReviews() {
		if keep(r) {
			rating := r.Rating
			want.Fold(r.ID, pipeline.Fact{Label: r.Label, Groups: map[string]string{"app": r.App, "month": r.Date[:7]}, Rating: &rating}, +1)
		}
	}
	if want.Items == 0 {
		t.Fatal("the case keeps no review")
	}
	if diff := d.Tally.Diff(want); len(diff) > 0 {
		t.Errorf("labels and groups count other items:\n%s", strings.Join(diff, "\n"))
	}
	if d.Counts.Done != int(want.Items) || d.Counts.Items != int(want.Items)+wantDead {
		t.Errorf("counts %+v, want %d done of %d items", d.Counts, want.Items, int(want.Items)+wantDead)
	}
	dead := 0
	for _, rs := range d.Dead {
		for _, r := range rs {
			dead += r.Count
		}
	}
	if dead != wantDead || d.deadTotal() != wantDead {
		t.Errorf("dead letters %v (counted %d), want %d", d.Dead, d.deadTotal(), wantDead)
	}
	var cubeItems int64
	for _, c := range d.Cube.Cells {
		cubeItems += c.Items
	}
	if cubeItems != want.Items || d.Pivot.Total.Items != want.Items {
		t.Errorf("cube %d, pivot %d items, want %d", cubeItems, d.Pivot.Total.Items, want.Items)
	}
	var names []string
	for _, f := range where {
		names = append(names, f.String())
	}
	if !slices.Equal(d.Where, names) {
		t.Errorf("Where = %q, want %q", d.Where, names)
	}
}

// TestReport_WhereInEveryFormat: a report of one app names no other app
// in any format, and says it is filtered.
func TestReport_WhereInEveryFormat(t *testing.T) {
	d, err := Load(fixtureDB(t), LoadOptions{By: []string{"app", "month"}, Where: []Filter{{"app", "NoteNest"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer, *Data) error
		says   string
	}{
		{"text", func(b *bytes.Buffer, d *Data) error { return Text(b, d) }, "where app=NoteNest: "},
		{"markdown", func(b *bytes.Buffer, d *Data) error { return Markdown(b, d) }, "where app=NoteNest: "},
		{"html", func(b *bytes.Buffer, d *Data) error { return HTML(b, d) }, "where app=NoteNest: "},
		{"csv", func(b *bytes.Buffer, d *Data) error { return CSV(b, d) }, "NoteNest,"},
		{"json", func(b *bytes.Buffer, d *Data) error { return json.NewEncoder(b).Encode(d) }, `"where":["app=NoteNest"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.render(&b, d); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if i := strings.Index(out, "TaskFlow"); i >= 0 {
				t.Errorf("a report of NoteNest counts TaskFlow: …%s…", out[max(0, i-200):min(len(out), i+60)])
			}
			if !strings.Contains(out, tt.says) {
				t.Errorf("output lacks %q", tt.says)
			}
		})
	}
}

func TestLoad_WhereUnknownField(t *testing.T) {
	db := fixtureDB(t)
	for _, tt := range []struct{ field, nearest string }{
		{"ap", "app"},
		{"lable", "label"},
		{"Month", "month"},
	} {
		t.Run(tt.field, func(t *testing.T) {
			d, err := Load(db, LoadOptions{Where: []Filter{{tt.field, "x"}}})
			var ue *UnknownFieldError
			if !errors.As(err, &ue) || ue.Field != tt.field {
				t.Fatalf("Load = %v, %v; want an UnknownFieldError for %q", d != nil, err, tt.field)
			}
			for _, k := range []string{"app", "label", "month", "date", "rating"} {
				if !slices.Contains(ue.Known, k) {
					t.Errorf("known fields %q lack %q", ue.Known, k)
				}
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %q", err, tt.field)
			}
		})
	}
}
