package quotasim

import (
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
