package stages

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestMonthOf(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "rfc3339", in: "2024-03-15T10:20:30Z", want: "2024-03"},
		{name: "rfc3339 fractional", in: "2024-03-15T10:20:30.123456Z", want: "2024-03"},
		{name: "rfc3339 offset keeps its own month", in: "2024-01-31T23:30:00-05:00", want: "2024-01"},
		{name: "no zone", in: "2024-03-15T10:20:30", want: "2024-03"},
		{name: "date only", in: "2023-12-01", want: "2023-12"},
		{name: "date time", in: "2023-12-01 08:00:00", want: "2023-12"},
		{name: "date time fractional", in: "2023-12-01 08:00:00.5", want: "2023-12"},
		{name: "slashes", in: "2022/07/04", want: "2022-07"},
		{name: "compact", in: "20220704", want: "2022-07"},
		{name: "unix seconds", in: "1700000000", want: "2023-11"},
		{name: "unix milliseconds", in: "1700000000000", want: "2023-11"},
		{name: "surrounding space", in: " 2021-05-06 ", want: "2021-05"},
		{name: "month already", in: "2021-05", want: "2021-05"},
		{name: "year alone", in: "2024", want: Unknown},
		{name: "garbage", in: "last tuesday", want: Unknown},
		{name: "invalid date", in: "2024-13-45", want: Unknown},
		{name: "empty", in: "", want: Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MonthOf(tt.in); got != tt.want {
				t.Errorf("MonthOf(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestAggregate_Fact(t *testing.T) {
	classified := json.RawMessage(`{"label":"bug","confidence":0.9,"reason":"crash","model":"gemini-2.5-flash","usage":{}}`)
	rating := func(f float64) *float64 { return &f }
	tests := []struct {
		name    string
		agg     Aggregate
		item    pipeline.Item
		want    pipeline.Fact
		wantErr string // permanent error containing this
	}{
		{
			name: "defaults",
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"app": "notes", "date": "2024-03-15", "rating": "4"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "notes", "month": "2024-03"}, Rating: rating(4)},
		},
		{
			name: "missing fields are unknown",
			item: pipeline.Item{Record: pipeline.Record{ID: "a"}, Prev: classified},
			want: pipeline.Fact{Label: "bug", Groups: map[string]string{"app": Unknown, "month": Unknown}},
		},
		{
			name: "blank field is unknown and bad date is unknown",
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"app": "  ", "date": "soon"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug", Groups: map[string]string{"app": Unknown, "month": Unknown}},
		},
		{
			name:    "a label too long to count",
			item:    pipeline.Item{Record: pipeline.Record{ID: "a"}, Prev: json.RawMessage(`{"label":"` + strings.Repeat("x", maxFactValue+1) + `"}`)},
			wantErr: `item "a": its classify label is 1001 bytes, more than the 1000 a tally counts by`,
		},
		{
			name:    "a group's value too long to group by",
			item:    pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"app": strings.Repeat("y", maxFactValue+1)}}, Prev: classified},
			wantErr: `item "a": its "app" field is 1001 bytes, more than the 1000 a tally groups by: shorten it in the input file`,
		},
		{
			name: "a label and a group's value at the most",
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"app": strings.Repeat("y", maxFactValue)}},
				Prev: json.RawMessage(`{"label":"` + strings.Repeat("x", maxFactValue) + `"}`)},
			want: pipeline.Fact{Label: strings.Repeat("x", maxFactValue), Groups: map[string]string{"app": strings.Repeat("y", maxFactValue), "month": Unknown}},
		},
		{
			name: "field names match ignoring case",
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"App": "maps", "Date": "1700000000", "Rating": "3.5"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "maps", "month": "2023-11"}, Rating: rating(3.5)},
		},
		{
			name: "month field used when no date",
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"month": "2020-02"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug", Groups: map[string]string{"app": Unknown, "month": "2020-02"}},
		},
		{
			name: "custom fields",
			agg:  Aggregate{GroupBy: []string{"country", "month"}, DateField: "at", RatingField: "stars"},
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"country": "de", "at": "2021/01/02", "stars": "5", "rating": "1"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug", Groups: map[string]string{"country": "de", "month": "2021-01"}, Rating: rating(5)},
		},
		{
			name: "no grouping",
			agg:  Aggregate{GroupBy: []string{}},
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"app": "notes"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug"},
		},
		{
			name: "non-numeric ratings left out",
			agg:  Aggregate{GroupBy: []string{}},
			item: pipeline.Item{Record: pipeline.Record{ID: "a", Fields: map[string]string{"rating": "NaN"}}, Prev: classified},
			want: pipeline.Fact{Label: "bug"},
		},
		{
			name: "classify output from Outputs",
			agg:  Aggregate{GroupBy: []string{}},
			item: pipeline.Item{Record: pipeline.Record{ID: "a"}, Outputs: map[string]json.RawMessage{"classify": classified}},
			want: pipeline.Fact{Label: "bug"},
		},
		{
			name:    "no classify output",
			item:    pipeline.Item{Record: pipeline.Record{ID: "a", Line: 3}},
			wantErr: `item "a" (input line 3) has no classify output`,
		},
		{
			name:    "classify output not JSON",
			item:    pipeline.Item{Record: pipeline.Record{ID: "a"}, Prev: json.RawMessage(`{"label":`)},
			wantErr: "not a JSON object",
		},
		{
			name:    "classify output without label",
			item:    pipeline.Item{Record: pipeline.Record{ID: "a"}, Prev: json.RawMessage(`{"text":"sanitized, not classified"}`)},
			wantErr: "has no label",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.agg.Fact(tt.item)
			if tt.wantErr != "" {
				// Stored as the dead letter: the CLI words the command.
				if pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "sawtooth") {
					t.Fatalf("err = %v, want permanent containing %q and no command", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Label != tt.want.Label || !maps.Equal(got.Groups, tt.want.Groups) ||
				(got.Rating == nil) != (tt.want.Rating == nil) || (got.Rating != nil && *got.Rating != *tt.want.Rating) {
				t.Errorf("Fact = %+v (rating %v), want %+v (rating %v)", got, deref(got.Rating), tt.want, deref(tt.want.Rating))
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestAggregate_Process(t *testing.T) {
	a := &Aggregate{}
	it := pipeline.Item{
		Record: pipeline.Record{ID: "a", Fields: map[string]string{"app": "notes", "date": "2024-03-15T10:00:00Z", "rating": "2"}},
		Prev:   json.RawMessage(`{"label":"pricing","confidence":0.7,"reason":"too expensive","model":"m","usage":{}}`),
	}
	res, err := a.Process(context.Background(), it)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"label":"pricing","groups":{"app":"notes","month":"2024-03"},"rating":2}`
	if string(res.Output) != want {
		t.Errorf("output = %s, want %s", res.Output, want)
	}
	if a.Name() != "aggregate" {
		t.Errorf("Name = %q", a.Name())
	}
}

func TestAggregate_Count(t *testing.T) {
	outs := map[string]json.RawMessage{
		"classify": json.RawMessage(`{"label":"bug"}`),
		"extract": json.RawMessage(`{"severity":"high","count":3,"component":"","note":"` + strings.Repeat("n", maxFactValue) +
			`","essay":"` + strings.Repeat("e", maxFactValue+1) + `"}`),
		"skipper": json.RawMessage(`{"skipped":true,"when":"x"}`),
	}
	it := pipeline.Item{Record: pipeline.Record{ID: "1", Fields: map[string]string{"app": "maps"}}, Outputs: outs}
	tests := []struct {
		count, want, err string
	}{
		{"extract.severity", "high", ""},
		{"extract.count", "3", ""},
		{"extract.component", Unknown, ""},
		{"extract.missing", Unknown, ""},
		{"skipper.severity", "skipped", ""},
		{"classify.label", "bug", ""},
		{"nostage.x", "", "has no nostage output"},
		{"extract.note", strings.Repeat("n", maxFactValue), ""},
		{"extract.essay", "", `item "1": its extract.essay is 1001 bytes, more than the 1000 a tally counts by`},
	}
	for _, tt := range tests {
		t.Run(tt.count, func(t *testing.T) {
			a := &Aggregate{Count: tt.count, GroupBy: []string{"app"}}
			f, err := a.Fact(it)
			if tt.err != "" {
				if pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want permanent containing %q", err, tt.err)
				}
				return
			}
			if err != nil || f.Label != tt.want || f.Groups["app"] != "maps" {
				t.Errorf("Fact = %+v, %v; want label %q", f, err, tt.want)
			}
		})
	}
}
