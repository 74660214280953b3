package dates

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		order  Order
		layout string
		want   string // ISO form, "" for not a date
		kind   Kind
	}{
		{"RFC 3339", "2026-11-03T10:00:00+02:00", Auto, "", "2026-11-03T10:00:00+02:00", Canonical},
		{"RFC 3339 with fraction", "2026-11-03T10:00:00.5Z", Auto, "", "2026-11-03T10:00:00.5Z", Canonical},
		{"date only", "2026-11-03", Auto, "", "2026-11-03", Canonical},
		{"year and month", "2026-11", Auto, "", "2026-11-01", Canonical},
		{"compact", "20261103", Auto, "", "2026-11-03", Canonical},
		{"year first with dots", "2026.11.03", Auto, "", "2026-11-03", Canonical},
		{"unix seconds", "1793700000", Auto, "", "2026-11-03T10:00:00Z", Canonical},
		{"unix milliseconds", "1793700000000", Auto, "", "2026-11-03T10:00:00Z", Canonical},
		{"a year alone is no date", "2026", Auto, "", "", Invalid},
		{"US slashes", "11/03/2026", Auto, "", "2026-11-03", Numeric},
		{"slashes read day first", "11/03/2026", DayFirst, "", "2026-03-11", Numeric},
		{"slashes with a day above 12", "13/03/2026", Auto, "", "2026-03-13", Numeric},
		{"day above 12 where month first is forced", "13/03/2026", MonthFirst, "", "", Invalid},
		{"dots, European", "03.11.2026", Auto, "", "2026-11-03", Numeric},
		{"dots read month first", "03.11.2026", MonthFirst, "", "2026-03-11", Numeric},
		{"slashes with a time", "11/03/2026 14:05", Auto, "", "2026-11-03T14:05:00Z", Numeric},
		{"31 February", "02/31/2026", Auto, "", "", Invalid},
		{"month name", "Nov 3, 2026", Auto, "", "2026-11-03", Named},
		{"full month name", "November 3, 2026", Auto, "", "2026-11-03", Named},
		{"day before month name", "3 Nov 2026", Auto, "", "2026-11-03", Named},
		{"RFC 1123", "Tue, 03 Nov 2026 10:00:00 GMT", Auto, "", "2026-11-03T10:00:00Z", Named},
		{"custom layout", "2026.11.03 14h05", Auto, "2006.01.02 15h04", "2026-11-03T14:05:00Z", Custom},
		{"custom layout falls back", "2026-11-03", Auto, "02/01/06", "2026-11-03", Canonical},
		{"spaces", "  2026-11-03 ", Auto, "", "2026-11-03", Canonical},
		{"text", "yesterday", Auto, "", "", Invalid},
		{"empty", "", Auto, "", "", Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := Parse(tt.in, tt.order, tt.layout)
			got := ""
			if ok {
				got = d.ISO()
			}
			if got != tt.want || d.Kind != tt.kind {
				t.Fatalf("Parse(%q) = %q kind %d, want %q kind %d", tt.in, got, d.Kind, tt.want, tt.kind)
			}
		})
	}
}

func TestMonth(t *testing.T) {
	for in, want := range map[string]string{"Nov 3, 2026": "2026-11", "03.11.2026": "2026-11", "x": ""} {
		if got := Month(in); got != want {
			t.Errorf("Month(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMonth_InTheDatesOwnOffset: a timestamp's month is the one written
// in its own offset, as the person who wrote the row saw it; converting to
// UTC (or the machine's zone) first would move the last hours of a month
// west of Greenwich, and the first hours east of it, into their neighbour.
func TestMonth_InTheDatesOwnOffset(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"late on the 31st, west of UTC (February in UTC)", "2026-01-31T23:30:00-05:00", "2026-01"},
		{"early on the 1st, east of UTC (January in UTC)", "2026-02-01T00:30:00+01:00", "2026-02"},
		{"a space and a numeric offset", "2026-01-31 23:30:00 -0500", "2026-01"},
		{"year end, west of UTC", "2026-12-31T22:00:00-08:00", "2026-12"},
		{"Z is UTC", "2026-01-31T23:30:00Z", "2026-01"},
		{"RFC 1123 with an offset", "Sat, 31 Jan 2026 23:30:00 -0500", "2026-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Month(tt.in); got != tt.want {
				t.Fatalf("Month(%q) = %q, want %q", tt.in, got, tt.want)
			}
			d, ok := Parse(tt.in, Auto, "")
			if !ok || d.Month() != tt.want {
				t.Fatalf("Parse(%q).Month() = %q (ok %v), want %q", tt.in, d.Month(), ok, tt.want)
			}
		})
	}
}

func TestEvidence_Decide(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   Order
		report []string // parts of the report; nil for none
	}{
		{"no numeric dates", []string{"2026-01-02", "Jan 2, 2026"}, Auto, nil},
		{"only day first, no ambiguity", []string{"13/01/2026", "25/12/2026"}, DayFirst, nil},
		{"day first decides the ambiguous ones", []string{"13/01/2026", "03/04/2026"}, DayFirst,
			[]string{"day/month/year", "1 value can only be read that way (e.g. 13/01/2026)", "1 could be either (e.g. 03/04/2026)"}},
		{"month first majority", []string{"01/13/2026", "01/14/2026", "13/01/2026", "03/04/2026"}, MonthFirst,
			[]string{"month/day/year", "2 values", "against 1 the other way"}},
		{"nothing decides", []string{"03/04/2026", "05/06/2026"}, Auto,
			[]string{"2 dates could be read as day/month or month/day (e.g. 03/04/2026, 05/06/2026)", "--date-format"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Evidence
			for _, v := range tt.values {
				e.Add(v)
			}
			got, report := e.Decide()
			if got != tt.want {
				t.Errorf("order %v, want %v", got, tt.want)
			}
			if (report == "") != (tt.report == nil) {
				t.Fatalf("report %q, want parts %q", report, tt.report)
			}
			for _, w := range tt.report {
				if !strings.Contains(report, w) {
					t.Errorf("report %q lacks %q", report, w)
				}
			}
		})
	}
}
