package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strings"
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

// RatingScale is the fixed point of rating sums: a rating is counted in
// units of 1/RatingScale, so ratings written with up to nine decimals add
// and subtract exactly, whatever their magnitude.
const RatingScale = 1_000_000_000

// RatingSum accumulates ratings exactly, so an average stays right under
// removal (float sums lose small ratings next to large ones: 3 + 1e17 -
// 1e17 is 0) and never overflows to infinity. The zero value is empty.
type RatingSum struct {
	// Scaled is the sum in units of 1/RatingScale; nil means zero. Treat
	// it as read-only: Fold replaces it rather than changing it.
	Scaled *big.Int
	// Count is how many ratings the sum holds.
	Count int64
}

// ratingJSON is RatingSum on the wire: the sum as an exact decimal
// number (at most nine decimals, however large), so `report --format
// json` reads {"sum": 99, "count": 3} as before the sums were exact.
type ratingJSON struct {
	Sum   json.Number `json:"sum"`
	Count int64       `json:"count"`
}

// MarshalJSON writes the exact sum as a decimal number.
func (r RatingSum) MarshalJSON() ([]byte, error) {
	n := new(big.Int)
	if r.Scaled != nil {
		n.Set(r.Scaled)
	}
	neg := n.Sign() < 0
	n.Abs(n)
	q, m := new(big.Int).QuoRem(n, big.NewInt(RatingScale), new(big.Int))
	dec := q.String()
	if m.Sign() != 0 {
		frac := fmt.Sprintf("%09d", m.Int64())
		dec += "." + strings.TrimRight(frac, "0")
	}
	if neg {
		dec = "-" + dec
	}
	return json.Marshal(ratingJSON{Sum: json.Number(dec), Count: r.Count})
}

// UnmarshalJSON reads what MarshalJSON writes, exactly.
func (r *RatingSum) UnmarshalJSON(b []byte) error {
	var v ratingJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = RatingSum{Count: v.Count}
	if v.Sum == "" {
		return nil
	}
	x, ok := new(big.Rat).SetString(string(v.Sum))
	if !ok {
		return fmt.Errorf("rating sum %q is not a number", v.Sum)
	}
	x.Mul(x, new(big.Rat).SetInt64(RatingScale))
	r.Scaled = new(big.Int).Quo(x.Num(), x.Denom())
	return nil
}

// ScaledRating converts a rating to units of 1/RatingScale, rounding half
// away from zero; ok is false for NaN and infinities, which are never
// summed.
func ScaledRating(r float64) (n *big.Int, ok bool) {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return nil, false
	}
	x := new(big.Rat).SetFloat64(r)
	x.Mul(x, new(big.Rat).SetInt64(RatingScale))
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	// Round half away from zero: |2m| >= den moves q one step out.
	if m.Sign() != 0 && new(big.Int).Abs(new(big.Int).Lsh(m, 1)).Cmp(x.Denom()) >= 0 {
		q.Add(q, big.NewInt(int64(m.Sign())))
	}
	return q, true
}

// Sum is the sum of the ratings, rounded to the nearest float64.
func (r RatingSum) Sum() float64 {
	if r.Scaled == nil {
		return 0
	}
	f, _ := new(big.Rat).SetFrac(r.Scaled, big.NewInt(RatingScale)).Float64()
	return f
}

// Mean is the average rating, rounded to the nearest float64 from the
// exact sum; 0 when there is none.
func (r RatingSum) Mean() float64 {
	if r.Count == 0 || r.Scaled == nil {
		return 0
	}
	den := new(big.Int).Mul(big.NewInt(r.Count), big.NewInt(RatingScale))
	f, _ := new(big.Rat).SetFrac(r.Scaled, den).Float64()
	return f
}

// Add returns r with d ratings of total scaled added (d < 0 removes).
func (r RatingSum) Add(scaled *big.Int, d int64) RatingSum {
	sum := new(big.Int)
	if r.Scaled != nil {
		sum.Set(r.Scaled)
	}
	if scaled != nil {
		sum.Add(sum, scaled)
	}
	return RatingSum{Scaled: sum, Count: r.Count + d}
}

// Equal reports whether r and s hold the same count and exact sum.
func (r RatingSum) Equal(s RatingSum) bool {
	zero := new(big.Int)
	a, b := r.Scaled, s.Scaled
	if a == nil {
		a = zero
	}
	if b == nil {
		b = zero
	}
	return r.Count == s.Count && a.Cmp(b) == 0
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
	if scaled, ok := f.ScaledRating(); ok {
		r := t.Ratings[f.Label].Add(scaled.Mul(scaled, big.NewInt(d)), d)
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

// ScaledRating is the fact's rating as Fold sums it, in units of
// 1/RatingScale; ok is false when it has none or it is not finite.
func (f Fact) ScaledRating() (*big.Int, bool) {
	if f.Rating == nil {
		return nil, false
	}
	return ScaledRating(*f.Rating)
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
		if !a.Equal(b) {
			out = append(out, fmt.Sprintf("rating %q: %v/%d != %v/%d", k, a.Sum(), a.Count, b.Sum(), b.Count))
		}
	}
	return out
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
