package bench

import (
	"strings"
	"testing"
)

// TestRunRandom: the table has the overall row and one per family drawn,
// every figure in range, and the worst shapes listed with their seeds; the
// same seed gives the same table.
func TestRunRandom(t *testing.T) {
	var a, b strings.Builder
	rs := RunRandom(RandomOptions{Shapes: 12, Seed: 3, Worst: 2}, &a)
	RunRandom(RandomOptions{Shapes: 12, Seed: 3, Worst: 2}, &b)
	if a.String() != b.String() {
		t.Fatalf("two runs of seed 3 differ:\n%s\n%s", a.String(), b.String())
	}
	if len(rs) != 12 {
		t.Fatalf("%d results, want 12", len(rs))
	}
	for _, r := range rs {
		if r.Done != r.Shape.Items || r.Stalled != "" {
			t.Errorf("%s: %d of %d items done (%s)", r.Shape.Name, r.Done, r.Shape.Items, r.Stalled)
		}
		if g := r.Goodput(); g <= 0 || g > 1.0001 {
			t.Errorf("%s: goodput %.3f, want in (0, 1]", r.Shape.Name, g)
		}
	}
	out := a.String()
	if !strings.Contains(out, "\nall ") || strings.Count(out, "seed ") < 3 {
		t.Errorf("table lacks the overall row or the worst shapes' seeds:\n%s", out)
	}
}
