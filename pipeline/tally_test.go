package pipeline

import (
	"encoding/json"
	"math"
	"math/big"
	"testing"
)

func TestScaledRating(t *testing.T) {
	tests := []struct {
		name string
		in   float64
		want string // decimal, units of 1/RatingScale; "" = not summed
	}{
		{"integer", 4, "4000000000"},
		{"a tenth (not exact in binary)", 0.1, "100000000"},
		{"negative", -2.5, "-2500000000"},
		// 0.5e-9 is not half a unit in binary (its float64 is a little
		// above), so it rounds to 1 under any tie rule.
		{"just above half a unit", 0.5e-9, "1"},
		{"just below minus half a unit", -0.5e-9, "-1"},
		{"below half a unit", 0.4e-9, "0"},
		// 1/1024 is exact in binary and 976562.5 units: an exact tie,
		// rounded half away from zero as documented.
		{"an exact tie rounds away from zero", 1.0 / 1024, "976563"},
		{"a negative exact tie rounds away from zero", -1.0 / 1024, "-976563"},
		{"huge (1e308 is an integer in binary)", 1e308, exactTimesScale(1e308)},
		{"NaN", math.NaN(), ""},
		{"+Inf", math.Inf(1), ""},
		{"-Inf", math.Inf(-1), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ScaledRating(tc.in)
			if tc.want == "" {
				if ok {
					t.Fatalf("ScaledRating(%v) = %v, want not ok", tc.in, got)
				}
				return
			}
			want, _ := new(big.Int).SetString(tc.want, 10)
			if !ok || got.Cmp(want) != 0 {
				t.Fatalf("ScaledRating(%v) = %v, %v; want %s", tc.in, got, ok, tc.want)
			}
		})
	}
}

// exactTimesScale is an integral float times RatingScale, in decimal.
func exactTimesScale(f float64) string {
	n, _ := new(big.Float).SetFloat64(f).Int(nil)
	return n.Mul(n, big.NewInt(RatingScale)).String()
}

// TestTally_RatingsExact: sums are exact under folding in and out, and
// never overflow.
func TestTally_RatingsExact(t *testing.T) {
	r := func(v float64) *float64 { return &v }
	var tl Tally
	tl.Fold("a", Fact{Label: "bug", Rating: r(3)}, +1)
	tl.Fold("b", Fact{Label: "bug", Rating: r(1e17)}, +1)
	tl.Fold("b", Fact{Label: "bug", Rating: r(1e17)}, -1)
	tl.Fold("b", Fact{Label: "bug", Rating: r(5)}, +1)
	if got := tl.Ratings["bug"]; got.Count != 2 || got.Mean() != 4 {
		t.Errorf("3 and 1e17 corrected to 5: mean %v over %d, want 4", got.Mean(), got.Count)
	}
	tl.Fold("h1", Fact{Label: "huge", Rating: r(1e308)}, +1)
	tl.Fold("h2", Fact{Label: "huge", Rating: r(1e308)}, +1)
	if got := tl.Ratings["huge"]; math.IsInf(got.Mean(), 0) || got.Mean() != 1e308 {
		t.Errorf("1e308 twice: mean %v, want 1e308", got.Mean())
	}
	tl.Fold("n", Fact{Label: "nan", Rating: r(math.NaN())}, +1)
	if _, ok := tl.Ratings["nan"]; ok {
		t.Error("a NaN rating was summed")
	}
	var u Tally
	u.Fold("a", Fact{Label: "bug", Rating: r(3)}, +1)
	u.Fold("b", Fact{Label: "bug", Rating: r(5.000000001)}, +1)
	if d := u.Diff(tl); len(d) == 0 {
		t.Error("Diff missed a rating sum one billionth off")
	}
}

func TestRatingSum_JSON(t *testing.T) {
	tests := []struct {
		name    string
		ratings []float64
		want    string
	}{
		{"integers", []float64{40, 59}, `{"sum":99,"count":2}`},
		{"decimals", []float64{0.1, 0.2}, `{"sum":0.3,"count":2}`},
		{"a decimal with a leading zero", []float64{4.05}, `{"sum":4.05,"count":1}`},
		{"a sum with leading zeros in its fraction", []float64{1.000000001, 2}, `{"sum":3.000000001,"count":2}`},
		{"a negative decimal with a leading zero", []float64{-0.05}, `{"sum":-0.05,"count":1}`},
		{"negative", []float64{-2.25}, `{"sum":-2.25,"count":1}`},
		{"empty", nil, `{"sum":0,"count":0}`},
		{"beyond float64", []float64{1e308, 1e308}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r RatingSum
			for _, v := range tc.ratings {
				s, _ := ScaledRating(v)
				r = r.Add(s, 1)
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && string(b) != tc.want {
				t.Fatalf("JSON = %s, want %s", b, tc.want)
			}
			var back RatingSum
			if err := json.Unmarshal(b, &back); err != nil || !back.Equal(r) {
				t.Fatalf("round trip of %s = %+v, %v; want %+v", b, back, err, r)
			}
		})
	}
}
