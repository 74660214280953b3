package pipeline

import (
	"reflect"
	"testing"
)

// filledStats is a StageStats with every field set: each number to a
// value of its own (from base), each map to one entry.
func filledStats(t *testing.T, base int64) StageStats {
	t.Helper()
	var s StageStats
	v := reflect.ValueOf(&s).Elem()
	n := base
	for i := range v.NumField() {
		f := v.Field(i)
		n++
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(n)
		case reflect.Float64:
			f.SetFloat(float64(n) / 4)
		case reflect.Struct: // Usage: its Tier is the tier of its calls
			for j := range f.NumField() {
				n++
				if g := f.Field(j); g.Kind() == reflect.String {
					g.SetString(TierFlex)
				} else {
					g.SetInt(n)
				}
			}
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
		default:
			t.Fatalf("StageStats.%s: a %s field this test does not fill", v.Type().Field(i).Name, f.Kind())
		}
	}
	s.Tiers["flex"] = &TierStats{Calls: base + 1, CostUSD: 0.5}
	s.DeadReasons["blocked"] = int(base) + 1
	return s
}

// TestStageStats_Add: adding a stage's figures to none gives them all,
// every field (a field Add forgot is zero); adding them again sums every
// count and keeps the limits a stage's lowest, highest and last; o is
// not changed.
func TestStageStats_Add(t *testing.T) {
	o := filledStats(t, 0)
	var s StageStats
	s.Add(o)
	if !reflect.DeepEqual(s, o) {
		t.Fatalf("zero.Add(o) =\n%+v\nwant\n%+v", s, o)
	}
	if s.Tiers["flex"] == o.Tiers["flex"] {
		t.Error("Add shares o's tier figures: a later Add would change o")
	}
	later := filledStats(t, 100)
	later.LimitMin, later.LimitMax, later.LimitEnd, later.InFlightMax = o.LimitMin+1, o.LimitMax+1, 0, o.InFlightMax-1
	s.Add(later)
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"Done", s.Done, o.Done + later.Done},
		{"Paid", s.Paid, o.Paid + later.Paid},
		{"Cached", s.Cached, o.Cached + later.Cached},
		{"LeasesLost", s.LeasesLost, o.LeasesLost + later.LeasesLost},
		{"Usage", s.Usage, o.Usage.Add(later.Usage)},
		{"SavedUSD", s.SavedUSD, o.SavedUSD + later.SavedUSD},
		{"CacheSavedUSD", s.CacheSavedUSD, o.CacheSavedUSD + later.CacheSavedUSD},
		{"Tiers", *s.Tiers["flex"], TierStats{Calls: 102, CostUSD: 1}},
		{"DeadReasons", s.DeadReasons["blocked"], 102},
		{"LimitMin (the lowest)", s.LimitMin, o.LimitMin},
		{"LimitMax (the highest)", s.LimitMax, o.LimitMax + 1},
		{"LimitEnd (the last one set)", s.LimitEnd, o.LimitEnd},
		{"InFlightMax (the highest)", s.InFlightMax, o.InFlightMax},
		{"o unchanged", o.Tiers["flex"].Calls, int64(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

// TestRunSummary_Totals: the totals sum every stage's counts, and leave
// what is a stage's own (limits, in-flight peak, dead reasons) zero.
func TestRunSummary_Totals(t *testing.T) {
	a, b := filledStats(t, 0), filledStats(t, 100)
	got := RunSummary{Stages: map[string]*StageStats{"a": &a, "b": &b, "c": nil}}.Totals()
	want := a
	want.Add(b)
	want.Tiers = map[string]*TierStats{"flex": {Calls: 102, CostUSD: 1}}
	want.LimitMin, want.LimitMax, want.LimitEnd, want.InFlightMax, want.DeadReasons = 0, 0, 0, 0, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Totals() =\n%+v\nwant\n%+v", got, want)
	}
}
