package cli

import (
	"fmt"
	"unicode/utf8"
)

// nearest is the candidate closest to s in edit distance, if it is close
// enough to be a likely typo (at most a third of s's length, and at
// least 1, edits away); "" when none is.
func nearest(s string, candidates []string) string {
	best, bestD := "", -1
	limit := max(utf8.RuneCountInString(s)/3, 2)
	for _, c := range candidates {
		d := editDistance(s, c)
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// didYouMean is ": did you mean X?" for the nearest candidate (format
// says how to print it, e.g. "--%s"), or "".
func didYouMean(s string, candidates []string, format string) string {
	if n := nearest(s, candidates); n != "" {
		return ": did you mean " + fmt.Sprintf(format, n) + "?"
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
