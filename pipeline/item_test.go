package pipeline

import (
	"slices"
	"testing"
)

func TestRecord_ContentHash(t *testing.T) {
	base := Record{ID: "a", Text: "hello", Fields: map[string]string{"app": "x", "rating": "5"}, Line: 3}
	cases := []struct {
		name string
		rec  Record
		same bool
	}{
		{"same content on another line and id", Record{ID: "b", Text: "hello", Fields: map[string]string{"rating": "5", "app": "x"}, Line: 9}, true},
		{"text edited", Record{Text: "hello!", Fields: base.Fields}, false},
		{"field edited", Record{Text: "hello", Fields: map[string]string{"app": "x", "rating": "4"}}, false},
		{"field removed", Record{Text: "hello", Fields: map[string]string{"app": "x"}}, false},
		{"text and field run together", Record{Text: "hel", Fields: map[string]string{"loapp": "x", "rating": "5"}}, false},
		{"empty field added", Record{Text: "hello", Fields: map[string]string{"app": "x", "rating": "5", "": ""}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if same := tc.rec.ContentHash() == base.ContentHash(); same != tc.same {
				t.Errorf("same hash = %v, want %v", same, tc.same)
			}
		})
	}
}

func TestChangedFields(t *testing.T) {
	old := Record{Text: "t", Fields: map[string]string{"app": "x", "rating": "5", "gone": "1"}}
	cur := Record{Text: "t2", Fields: map[string]string{"app": "x", "rating": "4", "new": "1"}}
	got := ChangedFields(old, cur)
	slices.Sort(got)
	want := []string{"gone", "new", "rating", TextField}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ChangedFields = %q, want %q", got, want)
	}
	if got := ChangedFields(old, old); len(got) != 0 {
		t.Errorf("ChangedFields of a record and itself = %q", got)
	}
}
