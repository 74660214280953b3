package pipeline

import (
	"fmt"
	"slices"
	"sort"
)

// MaxExamples is how many example ids a Tally keeps per label.
const MaxExamples = 5

// Fact is what the aggregate stage contributes for one item: its label, the
// values of the configured group fields (month derived from a date field)
// and its rating, if any.
type Fact struct {
	// Label is the item's label.
	Label string `json:"label"`
	// Groups holds the group-by fields' values, by field.
	Groups map[string]string `json:"groups,omitempty"`
	// Rating is the item's rating, nil when it has none.
	Rating *float64 `json:"rating,omitempty"`
}

// RatingSum accumulates ratings so averages stay exact under removal.
type RatingSum struct {
	// Sum is the ratings added up.
	Sum float64 `json:"sum"`
	// Count is how many ratings Sum holds.
	Count int64 `json:"count"`
}

// Mean is the average rating, 0 when there is none.
func (r RatingSum) Mean() float64 {
	if r.Count == 0 {
		return 0
	}
	return r.Sum / float64(r.Count)
}

// Tally is the exact aggregate over every done item: counts by label, by
// group field value and label, rating sums by label, and a few example ids
// per label. Each item is folded in exactly once (sign +1) in the
// transaction that completes it, and folded out (sign -1) when it re-enters
// the pipeline. The zero value is an empty tally ready to use.
type Tally struct {
	// Items is the items folded in.
	Items int64 `json:"items"`
	// Labels counts items by label.
	Labels map[string]int64 `json:"labels"`
	// Groups counts items by group field, value and label.
	Groups map[string]map[string]map[string]int64 `json:"groups"`
	// Ratings sums ratings by label.
	Ratings map[string]RatingSum `json:"ratings"`
	// Examples keeps up to MaxExamples ids per label.
	Examples map[string][]string `json:"examples"`
}

// Fold adds (sign > 0) or removes (sign < 0) one item's fact.
func (t *Tally) Fold(id string, f Fact, sign int) {
	d := int64(1)
	if sign < 0 {
		d = -1
	}
	if t.Labels == nil {
		t.Labels = map[string]int64{}
		t.Groups = map[string]map[string]map[string]int64{}
		t.Ratings = map[string]RatingSum{}
		t.Examples = map[string][]string{}
	}
	t.Items += d
	bump(t.Labels, f.Label, d)
	for field, value := range f.Groups {
		byValue := t.Groups[field]
		if byValue == nil {
			byValue = map[string]map[string]int64{}
			t.Groups[field] = byValue
		}
		byLabel := byValue[value]
		if byLabel == nil {
			byLabel = map[string]int64{}
			byValue[value] = byLabel
		}
		bump(byLabel, f.Label, d)
		if len(byLabel) == 0 {
			delete(byValue, value)
		}
		if len(byValue) == 0 {
			delete(t.Groups, field)
		}
	}
	if f.Rating != nil {
		r := t.Ratings[f.Label]
		r.Sum += float64(d) * *f.Rating
		r.Count += d
		if r.Count == 0 {
			delete(t.Ratings, f.Label)
		} else {
			t.Ratings[f.Label] = r
		}
	}
	ex := t.Examples[f.Label]
	switch {
	case d > 0 && len(ex) < MaxExamples && !slices.Contains(ex, id):
		t.Examples[f.Label] = append(ex, id)
	case d < 0:
		if i := slices.Index(ex, id); i >= 0 {
			ex = slices.Delete(ex, i, i+1)
			if len(ex) == 0 {
				delete(t.Examples, f.Label)
			} else {
				t.Examples[f.Label] = ex
			}
		}
	}
}

func bump(m map[string]int64, k string, d int64) {
	m[k] += d
	if m[k] == 0 {
		delete(m, k)
	}
}

// Diff compares two tallies on everything that must be exact (item, label,
// group and rating counts and sums; example ids are a sample and may differ)
// and returns one line per difference, empty when they agree.
func (t Tally) Diff(u Tally) []string {
	var out []string
	if t.Items != u.Items {
		out = append(out, fmt.Sprintf("items: %d != %d", t.Items, u.Items))
	}
	for _, k := range unionKeys(t.Labels, u.Labels) {
		if t.Labels[k] != u.Labels[k] {
			out = append(out, fmt.Sprintf("label %q: %d != %d", k, t.Labels[k], u.Labels[k]))
		}
	}
	for _, field := range unionKeys(t.Groups, u.Groups) {
		for _, value := range unionKeys(t.Groups[field], u.Groups[field]) {
			a, b := t.Groups[field][value], u.Groups[field][value]
			for _, label := range unionKeys(a, b) {
				if a[label] != b[label] {
					out = append(out, fmt.Sprintf("%s=%q label %q: %d != %d", field, value, label, a[label], b[label]))
				}
			}
		}
	}
	for _, k := range unionKeys(t.Ratings, u.Ratings) {
		a, b := t.Ratings[k], u.Ratings[k]
		if a.Count != b.Count || !closeEnough(a.Sum, b.Sum) {
			out = append(out, fmt.Sprintf("rating %q: %v/%d != %v/%d", k, a.Sum, a.Count, b.Sum, b.Count))
		}
	}
	return out
}

func closeEnough(a, b float64) bool {
	d := a - b
	return d < 1e-6 && d > -1e-6
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := make(map[string]bool, len(a)+len(b))
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
