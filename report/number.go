package report

import (
	"math"
	"strconv"
)

// FormatNumber writes x as people write it: integers without a decimal
// point, fractions with at most 12 significant digits, so binary
// floating-point noise (0.8300000000000001) reads as 0.83. NaN and
// infinities print as Go spells them.
func FormatNumber(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return strconv.FormatInt(int64(x), 10)
	}
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 12, 64), 64)
	if err != nil {
		r = x
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}
