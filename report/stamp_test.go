package report

import (
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestPeriodStamps: a month's fingerprint depends on its figures only,
// not on the extra dims a --by adds, and changes with one label.
func TestPeriodStamps(t *testing.T) {
	build := func(dims []string, flip string) *Cube {
		c := NewCube(dims)
		for i, r := range fixtureReviews() {
			rating := r.Rating
			label := r.Label
			if r.ID == flip {
				label = "other"
			}
			c.Add(Review{ID: r.ID, Label: label, Confidence: r.Confidence, Rating: &rating,
				Groups: map[string]string{"app": r.App, "month": r.Date[:7], "lang": []string{"en", "de", "fr"}[i%3]}})
		}
		c.Sort()
		return c
	}
	aggDims := []string{"app", MonthField}
	base := periodStamps(build([]string{"app", "month"}, ""), aggDims, Window{}, nil)
	if len(base) != 3 {
		t.Fatalf("%d months stamped, want 3: %+v", len(base), base)
	}
	flipID := ""
	for _, r := range fixtureReviews() {
		if r.Date[:7] == "2026-10" {
			flipID = r.ID
			break
		}
	}
	tests := []struct {
		name    string
		stamps  []PeriodStamp
		changed []string
	}{
		{"more dims, same figures", periodStamps(build([]string{"lang", "app", "month"}, ""), aggDims, Window{}, nil), nil},
		{"one label changed in 2026-10", periodStamps(build([]string{"app", "month"}, flipID), aggDims, Window{}, nil), []string{"2026-10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var changed []string
			for i, s := range tt.stamps {
				if s.Month != base[i].Month {
					t.Fatalf("month %d is %s, want %s", i, s.Month, base[i].Month)
				}
				if s.Fingerprint != base[i].Fingerprint {
					changed = append(changed, s.Month)
				}
			}
			if strings.Join(changed, ",") != strings.Join(tt.changed, ",") {
				t.Errorf("changed months %v, want %v", changed, tt.changed)
			}
		})
	}
	t.Run("window and filters", func(t *testing.T) {
		got := periodStamps(build([]string{"app", "month"}, ""), aggDims, Window{From: "2026-11", To: "2026-11"}, []string{"app=TaskFlow"})
		if len(got) != 1 || got[0].Period != "2026-11 where app=TaskFlow" || got[0].Fingerprint != base[2].Fingerprint {
			t.Errorf("got %+v", got)
		}
	})
}

// TestLoad_ChangedSinceLastReport: Load compares each month with the
// stamp the last report recorded, and says so once an item of the month
// changes.
func TestLoad_ChangedSinceLastReport(t *testing.T) {
	db := fixtureDB(t)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	opts := LoadOptions{Window: Window{From: "2026-11", To: "2026-11"}, Now: func() time.Time { return at }}
	load := func() *Data {
		t.Helper()
		d, err := Load(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		d.Zone = time.UTC
		return d
	}
	first := load()
	if len(first.Periods) != 1 || first.Periods[0].Changed || !first.Periods[0].LastReport.IsZero() || len(first.ChangeNotes()) != 0 {
		t.Fatalf("first report: %+v, notes %v", first.Periods, first.ChangeNotes())
	}
	for p, s := range first.Stamps() {
		if err := db.SaveReportFingerprint(p, s); err != nil {
			t.Fatal(err)
		}
	}
	opts.By = []string{"month", "app"}
	if again := load(); again.Periods[0].Changed || !again.Periods[0].LastReport.Equal(at) {
		t.Fatalf("unchanged figures with --by: %+v", again.Periods)
	}

	// Edit a November review's rating: it goes back through the stages,
	// so November's figures lose it.
	var edited pipeline.Record
	for _, r := range fixtureReviews() {
		if r.Date[:7] == "2026-11" {
			edited = r.record()
			break
		}
	}
	edited.Fields["rating"] = "1"
	if _, err := db.Ingest([]pipeline.Record{edited}); err != nil {
		t.Fatal(err)
	}
	later := load()
	want := "figures for 2026-11 changed since the report of 2026-12-01 09:00 UTC"
	if notes := later.ChangeNotes(); len(notes) != 1 || notes[0] != want {
		t.Fatalf("notes %q, want %q", notes, want)
	}
	var text strings.Builder
	if err := Text(&text, later); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), want) {
		t.Errorf("the text report lacks the note:\n%s", text.String())
	}
}
