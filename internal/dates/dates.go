// Package dates reads the dates people put in review exports: RFC 3339,
// 2006-01-02, 01/02/2006, 02.01.2006, Jan 2, 2006, Unix seconds and a few
// more, plus a layout the user names. Ingest uses it to check and normalise
// a file's date column (deciding the day/month order of the whole file at
// once); the aggregate stage uses it to derive the month group.
package dates

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Order says how to read a numeric date whose first two numbers could each
// be the day or the month (03/04/2026).
type Order uint8

const (
	// Auto reads slashed dates month first (01/02/2006, the US order) and
	// dotted ones day first (02.01.2006, the European order), unless a
	// number above 12 shows the other order.
	Auto Order = iota
	// MonthFirst reads 03/04/2026 and 03.04.2026 as March 4.
	MonthFirst
	// DayFirst reads 03/04/2026 and 03.04.2026 as 3 April.
	DayFirst
)

// String names the order as a user would write it.
func (o Order) String() string {
	switch o {
	case MonthFirst:
		return "month/day/year"
	case DayFirst:
		return "day/month/year"
	}
	return "auto"
}

// Kind says which family of layouts a date was read with.
type Kind uint8

const (
	// Invalid is a value that is not a date.
	Invalid Kind = iota
	// Canonical is RFC 3339, 2006-01-02 (with an optional time),
	// 2006/01/02, 2006.01.02, 20060102, 2006-01, or Unix seconds or
	// milliseconds: layouts that mean one thing whoever reads them.
	Canonical
	// Numeric is a day, a month and a four-digit year separated by / or .
	// (01/02/2006, 02.01.2006), whose order may be ambiguous.
	Numeric
	// Named is a date with the month's name: Jan 2, 2006, 2 January 2006,
	// or RFC 1123 (Mon, 02 Jan 2006 15:04:05 MST).
	Named
	// Custom is a date read with the caller's layout.
	Custom
)

// Date is one parsed value.
type Date struct {
	// Time is the instant, in the offset the value was written in (UTC
	// when it had none).
	Time time.Time
	// Kind is the layout family the value was read with.
	Kind Kind
	// HasTime is set when the value held a time of day, not just a date.
	HasTime bool
}

// ISO returns d as 2006-01-02, or as RFC 3339 when it holds a time of day.
func (d Date) ISO() string {
	if d.HasTime {
		return d.Time.Format(time.RFC3339Nano)
	}
	return d.Time.Format(time.DateOnly)
}

// Month returns d as "2006-01".
func (d Date) Month() string { return d.Time.Format("2006-01") }

var canonicalLayouts = []struct {
	layout  string
	hasTime bool
}{
	{time.RFC3339, true}, // fractional seconds are accepted when parsing
	{"2006-01-02T15:04:05", true},
	{time.DateTime, true},
	{"2006-01-02 15:04:05Z07:00", true},
	{"2006-01-02 15:04:05 -0700", true},
	{time.DateOnly, false},
	{"2006/01/02", false},
	{"2006/01/02 15:04:05", true},
	{"2006.01.02", false},
	{"2006-01", false},
}

var namedLayouts = []struct {
	layout  string
	hasTime bool
}{
	{"Jan 2, 2006", false},
	{"January 2, 2006", false},
	{"Jan 2 2006", false},
	{"January 2 2006", false},
	{"2 Jan 2006", false},
	{"2 January 2006", false},
	{"Mon, Jan 2, 2006", false},
	{"Monday, January 2, 2006", false},
	{time.RFC1123, true},
	{time.RFC1123Z, true},
	{"Jan 2, 2006 15:04", true},
	{"Jan 2, 2006 3:04 PM", true},
}

// Parse reads s as a date. layout, when not "", is a Go time layout
// (e.g. "2006.01.02 15h04") tried first. order decides numeric dates whose
// day and month could be swapped. Surrounding spaces are ignored.
func Parse(s string, order Order, layout string) (Date, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Date{}, false
	}
	if layout != "" {
		if t, err := time.Parse(layout, s); err == nil {
			return Date{Time: t, Kind: Custom, HasTime: strings.Contains(layout, "04")}, true
		}
	}
	if isDigits(s) {
		return parseDigits(s)
	}
	// The shape of nearly every date a file holds, which only
	// time.DateOnly of the canonical layouts reads: straight to it, not
	// through the five before it, each of which allocates its error.
	if len(s) == len(time.DateOnly) && s[4] == '-' && s[7] == '-' {
		if t, err := time.Parse(time.DateOnly, s); err == nil {
			return Date{Time: t, Kind: Canonical}, true
		}
	}
	for _, l := range canonicalLayouts {
		if t, err := time.Parse(l.layout, s); err == nil {
			return Date{Time: t, Kind: Canonical, HasTime: l.hasTime}, true
		}
	}
	if d, ok := parseNumeric(s, order); ok {
		return d, true
	}
	for _, l := range namedLayouts {
		if t, err := time.Parse(l.layout, s); err == nil {
			return Date{Time: t, Kind: Named, HasTime: l.hasTime}, true
		}
	}
	return Date{}, false
}

// Month returns the month ("2006-01") of s read with the Auto order, or ""
// when s is not a date.
func Month(s string) string {
	d, ok := Parse(s, Auto, "")
	if !ok {
		return ""
	}
	return d.Month()
}

// parseDigits reads an all-digit value: 20060102, or Unix seconds (9 to 11
// digits) or milliseconds (12 to 14 digits), in UTC. A year alone or
// fewer digits is no date.
func parseDigits(s string) (Date, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return Date{}, false
	case len(s) == 8:
		t, err := time.Parse("20060102", s)
		return Date{Time: t, Kind: Canonical}, err == nil
	case len(s) >= 9 && len(s) <= 11:
		return Date{Time: time.Unix(n, 0).UTC(), Kind: Canonical, HasTime: true}, true
	case len(s) >= 12 && len(s) <= 14:
		return Date{Time: time.UnixMilli(n).UTC(), Kind: Canonical, HasTime: true}, true
	}
	return Date{}, false
}

// numericParts splits "a/b/yyyy" or "a.b.yyyy", with an optional
// " HH:MM" or " HH:MM:SS" after it, into its numbers. ok is false for
// anything else.
func numericParts(s string) (a, b, year int, sep byte, clock string, ok bool) {
	date, clock, _ := strings.Cut(s, " ")
	sep = '/'
	if strings.IndexByte(date, '.') >= 0 {
		sep = '.'
	}
	parts := strings.Split(date, string(sep))
	if len(parts) != 3 || len(parts[2]) != 4 || len(parts[0]) > 2 || len(parts[1]) > 2 {
		return 0, 0, 0, 0, "", false
	}
	nums := [3]int{}
	for i, p := range parts {
		if !isDigits(p) {
			return 0, 0, 0, 0, "", false
		}
		nums[i], _ = strconv.Atoi(p)
	}
	return nums[0], nums[1], nums[2], sep, strings.TrimSpace(clock), true
}

func parseNumeric(s string, order Order) (Date, bool) {
	a, b, year, sep, clock, ok := numericParts(s)
	if !ok {
		return Date{}, false
	}
	day, month := b, a
	switch order {
	case DayFirst:
		day, month = a, b
	case Auto:
		if (sep == '.' && b <= 12) || a > 12 {
			day, month = a, b
		}
	}
	if month < 1 || month > 12 || day < 1 || day > 31 {
		return Date{}, false
	}
	hour, minute, sec := 0, 0, 0
	if clock != "" {
		var err error
		if hour, minute, sec, err = parseClock(clock); err != nil {
			return Date{}, false
		}
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC)
	if t.Day() != day { // 31/02/2026 would roll over into March
		return Date{}, false
	}
	return Date{Time: t, Kind: Numeric, HasTime: clock != ""}, true
}

func parseClock(s string) (h, m, sec int, err error) {
	for _, l := range []string{"15:04:05", "15:04"} {
		if t, perr := time.Parse(l, s); perr == nil {
			return t.Hour(), t.Minute(), t.Second(), nil
		}
	}
	return 0, 0, 0, fmt.Errorf("no time of day: %q", s)
}

// Evidence gathers, over one file, which day/month order its numeric dates
// can be read in, so the whole file is read one way.
type Evidence struct {
	// DayFirst counts values only readable day first (13/04/2026).
	DayFirst int
	// MonthFirst counts values only readable month first (04/13/2026).
	MonthFirst int
	// Ambiguous counts values readable either way (03/04/2026).
	Ambiguous int
	// Examples holds up to three of each kind, in order:
	// [0] day first, [1] month first, [2] ambiguous.
	Examples [3][]string
}

// Add counts s when it is a numeric date; other values are ignored.
func (e *Evidence) Add(s string) {
	a, b, _, _, _, ok := numericParts(strings.TrimSpace(s))
	if !ok || a < 1 || b < 1 || (a > 12 && b > 12) || a > 31 || b > 31 {
		return
	}
	i := 2
	switch {
	case a > 12:
		e.DayFirst++
		i = 0
	case b > 12:
		e.MonthFirst++
		i = 1
	default:
		e.Ambiguous++
	}
	if len(e.Examples[i]) < 3 {
		e.Examples[i] = append(e.Examples[i], strings.TrimSpace(s))
	}
}

// Decide returns the order to read the file's numeric dates in and, when
// the choice was not forced by the values, a sentence saying what was
// decided and why (empty when the file has no ambiguous date). Values that
// can only be read the other way fail under the returned order.
func (e *Evidence) Decide() (Order, string) {
	switch {
	case e.DayFirst > e.MonthFirst:
		if e.Ambiguous == 0 && e.MonthFirst == 0 {
			return DayFirst, ""
		}
		return DayFirst, fmt.Sprintf("dates read as day/month/year: %s can only be read that way (e.g. %s) against %d the other way; %d could be either (e.g. %s)",
			values(e.DayFirst), strings.Join(e.Examples[0], ", "), e.MonthFirst, e.Ambiguous, exampleList(e.Examples[2]))
	case e.MonthFirst > e.DayFirst:
		if e.Ambiguous == 0 && e.DayFirst == 0 {
			return MonthFirst, ""
		}
		return MonthFirst, fmt.Sprintf("dates read as month/day/year: %s can only be read that way (e.g. %s) against %d the other way; %d could be either (e.g. %s)",
			values(e.MonthFirst), strings.Join(e.Examples[1], ", "), e.DayFirst, e.Ambiguous, exampleList(e.Examples[2]))
	case e.Ambiguous > 0 || e.DayFirst > 0:
		return Auto, fmt.Sprintf("%d dates could be read as day/month or month/day (e.g. %s) and no value decides: slashed dates read as month/day/year, dotted ones as day/month/year; pass --date-format 02/01/2006 (or 01/02/2006) to choose",
			e.Ambiguous+e.DayFirst+e.MonthFirst, exampleList(append(append(slicesClone(e.Examples[2]), e.Examples[0]...), e.Examples[1]...)))
	}
	return Auto, ""
}

func values(n int) string {
	if n == 1 {
		return "1 value"
	}
	return fmt.Sprintf("%d values", n)
}

func exampleList(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	if len(xs) > 3 {
		xs = xs[:3]
	}
	return strings.Join(xs, ", ")
}

func slicesClone(xs []string) []string { return append([]string(nil), xs...) }

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
