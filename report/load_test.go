package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// fixtureDB runs the fixed dataset through a real store: sanitize passes
// the text on, classify answers with each review's label and confidence
// (and dead-letters one extra item with a hostile server message), and
// the aggregate stage folds the facts into the stored tally.
func fixtureDB(t *testing.T) *store.DB {
	t.Helper()
	return fixtureDBOf(t, fixtureReviews())
}

// fixtureDBOf is fixtureDB of the given reviews.
func fixtureDBOf(t *testing.T, reviews []fixtureReview) *store.DB {
	t.Helper()
	names := []string{"sanitize", "classify", "aggregate"}
	defs := make([]store.StageDef, len(names))
	for i, n := range names {
		defs[i].Name = n
	}
	db, err := store.Open(filepath.Join(t.TempDir(), "fixture.db"), store.Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fillFixture(t, db, reviews)
	return db
}

// fillFixture ingests the reviews and a review classify dead-letters,
// and drains them.
func fillFixture(t *testing.T, db pipeline.Database, reviews []fixtureReview) {
	t.Helper()
	recs := []pipeline.Record{{ID: "zz-dead", Text: "blocked", Fields: map[string]string{"app": "TaskFlow", "date": "2026-11-03"}}}
	for _, r := range reviews {
		recs = append(recs, r.record())
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	drain(t, db, reviews)
}

// drain takes every queued item of db through the three stages as
// fixtureDB does, classify answering from reviews (an id not among them
// is dead-lettered).
func drain(t *testing.T, db pipeline.Database, reviews []fixtureReview) {
	t.Helper()
	answers := map[string]fixtureReview{}
	for _, r := range reviews {
		answers[r.ID] = r
	}
	agg := &stages.Aggregate{}
	for _, stage := range []string{"sanitize", "classify", "aggregate"} {
		qs, err := db.Queued(stage, 0, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		var ts []pipeline.Transition
		for _, q := range qs {
			tr := pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded}
			switch stage {
			case "sanitize":
				tr.Result.Output, _ = json.Marshal(map[string]string{"text": q.Item.Text})
			case "classify":
				a, ok := answers[q.Item.ID]
				if !ok {
					tr.Outcome = pipeline.DeadLettered
					tr.Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "server said " + hostileScript + hostileEsc, Attempts: 1}
					break
				}
				tr.Result.Output = a.classifyOutput()
			case "aggregate":
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
}

// TestLoad_PivotFromStore: the pivot Load computes from the store's done
// items is the one the cube of the same reviews gives, and --where and
// --by errors behave.
func TestLoad_PivotFromStore(t *testing.T) {
	db := fixtureDB(t)
	nov := Window{From: "2026-11", To: "2026-11"}
	now := func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		name    string
		opts    LoadOptions
		want    func(t *testing.T) *Pivot
		wantErr string
	}{
		{name: "app by month in November", opts: LoadOptions{By: []string{"app", "month"}, Window: nov, Now: now}, want: func(t *testing.T) *Pivot {
			p, err := fixtureCube(t).Pivot(PivotOptions{By: []string{"app", "month"}, Window: nov})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{name: "where app=TaskFlow", opts: LoadOptions{By: []string{"month"}, Where: []Filter{{"app", "TaskFlow"}}, Now: now}, want: func(t *testing.T) *Pivot {
			c := NewCube([]string{"month", "app"})
			c.Where = []string{"app=TaskFlow"}
			for _, r := range fixtureReviews() {
				if r.App == "TaskFlow" {
					rating := r.Rating
					c.Add(Review{ID: r.ID, Label: r.Label, Confidence: r.Confidence, Rating: &rating, Groups: map[string]string{"app": r.App, "month": r.Date[:7]}, Text: r.Text})
				}
			}
			c.Sort()
			p, err := c.Pivot(PivotOptions{By: []string{"month"}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{name: "any input field groups, missing as unknown", opts: LoadOptions{By: []string{"locale"}, Now: now}, want: func(t *testing.T) *Pivot {
			c := NewCube([]string{"locale", "app"})
			for _, r := range fixtureReviews() {
				rating := r.Rating
				c.Add(Review{ID: r.ID, Label: r.Label, Confidence: r.Confidence, Rating: &rating, Groups: map[string]string{"app": r.App, "month": r.Date[:7]}, Text: r.Text})
			}
			c.Sort()
			p, err := c.Pivot(PivotOptions{By: []string{"locale"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rows) != 1 || p.Rows[0].Key[0] != "unknown" {
				t.Fatalf("rows %v, want one, unknown", p.Rows)
			}
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Load(db, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(d.Pivot)
			want, _ := json.Marshal(tt.want(t))
			if !bytes.Equal(got, want) {
				t.Errorf("pivot from the store differs from the cube's:\n got %s\nwant %s", got, want)
			}
			done := 0
			for _, r := range fixtureReviews() {
				if len(tt.opts.Where) == 0 || r.App == "TaskFlow" {
					done++
				}
			}
			if d.Counts.Done != done || len(d.Dead["classify"]) != 1 { // the dead letter is TaskFlow's
				t.Errorf("counts %+v, dead %v; want %d done and a dead letter", d.Counts, d.Dead, done)
			}
		})
	}
}

func TestExport_Store(t *testing.T) {
	db := fixtureDB(t)
	tests := []struct {
		name    string
		opts    ExportOptions
		rows    int
		header  string
		check   func(t *testing.T, rows [][]string)
		wantErr string
	}{
		{name: "every item", opts: ExportOptions{Format: FormatCSV}, rows: len(fixtureReviews()) + 1,
			header: "id,status,dead_reason,text,app,date,rating,sanitize.text,classify.confidence,classify.label,classify.reason,aggregate.groups,aggregate.label,aggregate.rating",
			check: func(t *testing.T, rows [][]string) {
				last := rows[len(rows)-1]
				if last[0] != "zz-dead" || last[1] != "dead at classify" || !strings.HasPrefix(last[2], "permanent: server said <script>") {
					t.Errorf("dead row = %q", last)
				}
				if rows[1][8] != "0.6" && rows[1][8] != "0.83" && rows[1][8] != "0.97" && rows[1][8] != "0.71" && rows[1][8] != "0.99" {
					t.Errorf("confidence printed as %q", rows[1][8])
				}
			}},
		{name: "classify keeps the input fields", opts: ExportOptions{Format: FormatCSV, Stage: "classify"}, rows: len(fixtureReviews()),
			header: "id,text,app,date,rating,confidence,label,reason"},
		{name: "chosen columns", opts: ExportOptions{Format: FormatCSV, Columns: []string{"id", "app", "classify.label"}}, rows: len(fixtureReviews()) + 1,
			header: "id,app,classify.label"},
		{name: "unknown stage", opts: ExportOptions{Format: FormatCSV, Stage: "clasify"}, wantErr: `unknown stage "clasify"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			err := Export(&b, db, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(&b).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(rows[0], ","); got != tt.header {
				t.Errorf("header %s\nwant   %s", got, tt.header)
			}
			if len(rows)-1 != tt.rows {
				t.Errorf("%d rows, want %d", len(rows)-1, tt.rows)
			}
			if tt.check != nil {
				tt.check(t, rows)
			}
		})
	}
}

// unreadableDefinition is a database whose recorded pipeline definition
// cannot be read.
type unreadableDefinition struct{ pipeline.Database }

func (unreadableDefinition) StoredDefinition() ([]pipeline.StageDef, error) {
	return nil, errors.New("meta/definition: bad json")
}

// TestLoad_RecordError: a definition the database recorded and cannot
// give back is a RecordError with what was read and why, from Load and
// Export alike; the message names no command (the CLI adds verify).
func TestLoad_RecordError(t *testing.T) {
	db := unreadableDefinition{fixtureDB(t)}
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"load", func() error { _, err := Load(db, LoadOptions{}); return err }, "read the recorded pipeline definition: meta/definition: bad json"},
		{"export", func() error { return Export(&bytes.Buffer{}, db, ExportOptions{Format: FormatJSONL}) },
			"export: read the recorded pipeline definition: meta/definition: bad json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			var rec *RecordError
			if !errors.As(err, &rec) || err.Error() != tc.want {
				t.Errorf("err = %v, want a RecordError %q", err, tc.want)
			}
		})
	}
}
