package quotasim

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestWriteTable_worst429: the table lists the worst shapes by 429 share
// after those by goodput, the highest share first, so a shape that loses
// little time but lives on refusals shows.
func TestWriteTable_worst429(t *testing.T) {
	result := func(name string, wall time.Duration, calls, refused int) Result {
		return Result{Shape: Shape{Name: name, Items: 100}, Wall: wall, Perfect: time.Second, Calls: calls, R429s: refused, Done: 100}
	}
	rs := []Result{
		result("slow-few-429s", 4*time.Second, 101, 1),
		result("quick-many-429s", time.Second, 125, 25),
		result("middling", 2*time.Second, 110, 10),
	}
	var b strings.Builder
	WriteTable(&b, rs, 1)
	out := b.String()
	byGoodput, by429, ok := strings.Cut(out, "worst 429 shares:")
	if !ok {
		t.Fatalf("no list of the worst 429 shares:\n%s", out)
	}
	if !strings.Contains(byGoodput, "slow-few-429s") {
		t.Errorf("the worst by goodput is not slow-few-429s:\n%s", out)
	}
	if !strings.Contains(by429, "quick-many-429s") || strings.Contains(by429, "middling") {
		t.Errorf("the worst by 429 share is not quick-many-429s alone:\n%s", out)
	}
}

// TestSummarize_429Tail: the summary gives the 429 share's p90 and counts
// the shapes over the 1% every shape must stay under, so a change that
// moves the tail shows beside the median.
func TestSummarize_429Tail(t *testing.T) {
	for _, tc := range []struct {
		name      string
		refused   []int // per 100 calls, one shape each
		p90       float64
		over1     int
		worst429  float64
		median429 float64
	}{
		{name: "none refused", refused: []int{0, 0, 0}, p90: 0, over1: 0, worst429: 0, median429: 0},
		{name: "one percent is not over", refused: []int{1, 1, 0, 0}, p90: 0.01, over1: 0, worst429: 0.01, median429: 0.01},
		{
			name:    "a tail of two in ten",
			refused: []int{0, 0, 0, 0, 0, 0, 0, 0, 3, 9},
			p90:     0.09, over1: 2, worst429: 0.09, median429: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rs []Result
			for i, n := range tc.refused {
				rs = append(rs, Result{Shape: Shape{Name: fmt.Sprint("shape ", i), Items: 100 - n}, Wall: time.Second, Perfect: time.Second, Calls: 100, R429s: n, Done: 100 - n})
			}
			s := Summarize(rs)
			if s.P90429 != tc.p90 || s.Over1Percent != tc.over1 || s.Worst429 != tc.worst429 || s.Share429 != tc.median429 {
				t.Errorf("429 median %v, p90 %v, worst %v, over 1%% %d; want %v, %v, %v, %d",
					s.Share429, s.P90429, s.Worst429, s.Over1Percent, tc.median429, tc.p90, tc.worst429, tc.over1)
			}
		})
	}
}
