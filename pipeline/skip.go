package pipeline

import "context"

// Skipper is a Stage that may leave an item out (a condition on earlier
// outputs). The runner asks Skip before taking a limiter slot: a skipped
// item commits Result as its output at once, costs no call and tells the
// limiter nothing, so a run of skips cannot inflate a learned limit.
// Skip must be cheap, pure and safe for concurrent use; when it cannot
// decide it returns false and Process reports the problem.
type Skipper interface {
	Skip(ctx context.Context, it Item) (Result, bool)
}
