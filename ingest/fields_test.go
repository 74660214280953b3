package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestLoad_ratings: ratings that would break the tally (not finite, out of
// range) are problems with their line; other ratings are kept.
func TestLoad_ratings(t *testing.T) {
	tests := []struct {
		name     string
		ratings  []string // lines 2.. of id,text,rating
		rng      string
		keep     []string // ids kept
		problems []prob
		warn     []string
	}{
		{
			name:    "in range, empty or missing are kept",
			ratings: []string{"0", "10", "4.5", ""},
			keep:    []string{"r2", "r3", "r4", "r5"},
		},
		{
			name:    "out of the default range, and not finite",
			ratings: []string{"1e308", "1e999", "NaN", "+Inf", "-1", "10.5", "1e17", "3"},
			keep:    []string{"r9"},
			problems: []prob{
				{2, `rating "rating" = "1e308" is outside the range 0-10: fix it, or set the rating range`},
				{3, `rating "rating" = "1e999" is not a finite number`},
				{4, `"NaN" is not a finite number`},
				{5, `"+Inf" is not a finite number`},
				{6, `"-1" is outside the range 0-10`},
				{7, `"10.5" is outside`},
				{8, `"1e17" is outside`},
			},
		},
		{
			name:     "another range",
			ratings:  []string{"1", "5", "0", "7"},
			rng:      "1-5",
			keep:     []string{"r2", "r3"},
			problems: []prob{{4, "outside the range 1-5"}, {5, "outside the range 1-5"}},
		},
		{
			name:    "text ratings are kept, and warned about past 5%",
			ratings: []string{"five", "4", "3", "2"},
			keep:    []string{"r2", "r3", "r4", "r5"},
			warn:    []string{`the rating field "rating": 1 of 4 ratings are not numbers (e.g. line 2: "five")`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			sb.WriteString("id,text,rating\n")
			for i, r := range tt.ratings {
				fmt.Fprintf(&sb, "r%d,x,%s\n", i+2, r)
			}
			got, r, err := readAll(t, strings.NewReader(sb.String()), Options{Format: CSV, RatingRange: tt.rng})
			if err != nil {
				t.Fatal(err)
			}
			if ids := ids(got); strings.Join(ids, ",") != strings.Join(tt.keep, ",") {
				t.Errorf("kept %v, want %v", ids, tt.keep)
			}
			checkProblems(t, r, tt.problems)
			checkWarnings(t, r.Warnings(), tt.warn)
		})
	}
}

func TestOptions_ratingRange(t *testing.T) {
	for _, rng := range []string{"ten", "5-1", "-Inf-10", "0-NaN", "0-"} {
		if err := (Options{Format: CSV, RatingRange: rng}).Validate(); err == nil || !strings.Contains(err.Error(), "the rating range") {
			t.Errorf("range %q: err = %v, want an unusable range", rng, err)
		}
	}
	for rng, want := range map[string][2]float64{"1-5": {1, 5}, "-5:5": {-5, 5}, " 0.5 - 4.5 ": {0.5, 4.5}} {
		lo, hi, err := ParseRatingRange(rng)
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("ParseRatingRange(%q) = %v, %v, %v; want %v", rng, lo, hi, err, want)
		}
	}
}

func checkWarnings(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("warning %q lacks %q", got[i], w)
		}
	}
}

// TestLoad_dates: dates in the common layouts are read, ambiguous ones in
// the order decided for the whole file, and rewritten as 2006-01-02; a
// date or group-by field missing from most rows, or more than 5% of dates
// that cannot be read, are warnings with counts and three examples.
func TestLoad_dates(t *testing.T) {
	tests := []struct {
		name      string
		rows      []string // app,date cells of lines 2..
		opt       Options
		want      []string // the date field of each record, in order
		dateOrder string   // part of Result.DateOrder, "" for none
		warn      []string
	}{
		{
			name:      "common layouts",
			rows:      []string{"a,2026-11-03", "a,2026-11-03T10:00:00+02:00", "a,1793700000", "a,Nov 3, 2026", "a,03.11.2026", "a,11/03/2026"},
			want:      []string{"2026-11-03", "2026-11-03T10:00:00+02:00", "1793700000", "2026-11-03", "2026-11-03", "2026-11-03"},
			dateOrder: "2 dates could be read as day/month or month/day (e.g. 03.11.2026, 11/03/2026)",
		},
		{
			name:      "a day above 12 decides the file: day first",
			rows:      []string{"a,03/11/2026", "a,25/12/2026", "a,04/05/2026"},
			want:      []string{"2026-11-03", "2026-12-25", "2026-05-04"},
			dateOrder: "dates read as day/month/year: 1 value can only be read that way (e.g. 25/12/2026) against 0 the other way; 2 could be either (e.g. 03/11/2026, 04/05/2026)",
		},
		{
			name:      "nothing decides: reported",
			rows:      []string{"a,03/11/2026", "a,04/05/2026"},
			want:      []string{"2026-03-11", "2026-04-05"},
			dateOrder: "2 dates could be read as day/month or month/day",
		},
		{
			name: "--date-format",
			rows: []string{"a,2026.11.03 14h05", "a,2026-11-04"},
			opt:  Options{DateFormat: "2006.01.02 15h04"},
			want: []string{"2026-11-03T14:05:00Z", "2026-11-04"},
		},
		{
			name: "unreadable dates past 5%",
			rows: []string{"a,yesterday", "a,soon", "a,2026-11-03", "a,never", "a,later"},
			want: []string{"yesterday", "soon", "2026-11-03", "never", "later"},
			warn: []string{`the date field "date": 4 of 5 dates could not be read (e.g. line 2: "yesterday", line 3: "soon", line 5: "never"): their month is "unknown"; set a date layout`},
		},
		{
			name: "fields missing from most rows",
			rows: []string{",", ",", "a,2026-11-03", ","},
			opt:  Options{GroupBy: []string{"app", "country", "month"}},
			want: []string{"", "", "2026-11-03", ""},
			warn: []string{
				`the group-by field "app": no value in 3 of 4 rows (e.g. line 2, line 3, line 5): those rows count as "unknown"`,
				`the group-by field "country": no value in 4 of 4 rows (e.g. line 2, line 3, line 4)`,
				`the date field "date": no value in 3 of 4 rows`,
			},
		},
		{
			name: "optional fields no row has are not warned about",
			rows: []string{",", ",", "a,", ","},
			opt:  Options{GroupBy: []string{"app", "month"}, OptionalFields: []string{"app", "date"}},
			want: []string{"", "", "", ""},
			warn: []string{`the group-by field "app": no value in 3 of 4 rows`},
		},
		{
			name: "no date check without the month group",
			rows: []string{"a,03/11/2026", "a,soon"},
			opt:  Options{GroupBy: []string{"app"}},
			want: []string{"03/11/2026", "soon"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			sb.WriteString("id,text,app,date,rating\n")
			for i, r := range tt.rows {
				app, date, _ := strings.Cut(r, ",")
				if strings.Contains(date, ",") {
					date = `"` + date + `"`
				}
				fmt.Fprintf(&sb, "r%d,x,%s,%s,3\n", i+2, app, date)
			}
			opt := tt.opt
			opt.Format = CSV
			if opt.GroupBy == nil {
				opt.GroupBy = []string{"app", "month"}
			}
			var got []pipeline.Record
			res, err := Load(context.Background(), writeInput(t, "in.csv", sb.String()), opt, 0, collect(&got))
			if err != nil {
				t.Fatal(err)
			}
			var dates []string
			for _, r := range got {
				dates = append(dates, r.Fields["date"])
			}
			if strings.Join(dates, "|") != strings.Join(tt.want, "|") {
				t.Errorf("dates %q, want %q", dates, tt.want)
			}
			if (res.DateOrder == "") != (tt.dateOrder == "") || !strings.Contains(res.DateOrder, tt.dateOrder) {
				t.Errorf("date order %q, want %q", res.DateOrder, tt.dateOrder)
			}
			checkWarnings(t, res.Warnings, tt.warn)
		})
	}
}
