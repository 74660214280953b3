package bench

import (
	"strconv"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// Reviews returns n generated app reviews (internal/reviewgen, seeded with
// seed) as records, with the fields the aggregate stage groups by. Texts
// may repeat; use DistinctReviews when each item must be told apart by its
// text (the simulator keys its accounting by the item id the classify
// stage sends, and by the text only for a client that sends none).
func Reviews(n int, seed uint64) []pipeline.Record {
	g := reviewgen.New(seed)
	out := make([]pipeline.Record, 0, n)
	for len(out) < n {
		out = append(out, record(g.Next(), len(out)+1))
	}
	return out
}

// DistinctReviews is Reviews with every text distinct once sanitized (the
// text the classify stage sends):
// a review whose cleaned text was already drawn is skipped. Reviews whose
// text is empty after cleaning are kept (they are dead-lettered at sanitize
// and never reach the API). Ids are "r000001", ... in order.
func DistinctReviews(n int, seed uint64) []pipeline.Record {
	g := reviewgen.New(seed)
	seen := make(map[string]bool, n)
	out := make([]pipeline.Record, 0, n)
	for len(out) < n {
		rv := g.Next()
		if c, err := stages.Clean(rv.Text, stages.SanitizeOptions{}); err == nil {
			if seen[c.Text] {
				continue
			}
			seen[c.Text] = true
		}
		out = append(out, record(rv, len(out)+1))
	}
	return out
}

func record(rv reviewgen.Review, line int) pipeline.Record {
	return pipeline.Record{
		ID:   "r" + leftPad(strconv.Itoa(line), 6),
		Text: rv.Text,
		Fields: map[string]string{
			"app": rv.App, "rating": strconv.Itoa(rv.Rating), "date": rv.Date,
			"locale": rv.Locale, "version": rv.Version,
		},
		Line: line,
	}
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}
