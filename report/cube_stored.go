package report

import (
	"cmp"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// storedCube is the cube of dims read from the store's per-period
// aggregate (pipeline.CubeReader) instead of every done item, or nil
// when that cannot answer exactly what the streaming pass would; then
// the caller streams. It cannot when:
//   - the store keeps no cube, or none it vouches for (a
//     database not opened for writing since an older sawtooth wrote it,
//     a cell that removals left short of quotes until the next writable
//     open rebuilds it);
//   - its cells are grouped by other fields than dims: a --by field the
//     aggregate stage does not group by, or no "month" among them;
//   - it disagrees with the tally or the done count (an older sawtooth
//     folded items without keeping it; a pipeline whose last stage
//     folds no facts).
//
// The tally and counts checked are those the store read with the cube
// when it did (one snapshot, while workers fold items), else t and
// counts; both are returned with the cube, for the report to show
// totals (items, done, dead, queued) that agree with it.
//
// --where is always streamed: the filtered tally keeps the first
// example ids in item order, which no per-cell aggregate holds.
func storedCube(db pipeline.Database, dims []string, t pipeline.Tally, counts pipeline.Counts) (*Cube, pipeline.Tally, pipeline.Counts, error) {
	cr, ok := db.(pipeline.CubeReader)
	if !ok {
		return nil, t, counts, nil
	}
	sc, ok, err := cr.StoredCube()
	if err != nil || !ok {
		return nil, t, counts, err
	}
	if sc.Tally != nil && sc.Counts != nil {
		t, counts = *sc.Tally, *sc.Counts
	}
	c := NewCube(dims)
	if !agreesWithTally(sc, t, counts.Done, len(c.Dims)) {
		return nil, t, counts, nil
	}
	index := map[string]*CubeCell{}
	for _, s := range sc.Cells {
		key := make([]string, len(c.Dims))
		for i, d := range c.Dims {
			v, ok := s.Groups[d]
			if !ok {
				return nil, t, counts, nil
			}
			key[i] = cmp.Or(strings.TrimSpace(v), unknown)
		}
		cell := index[cellKey(key)]
		if cell == nil {
			cell = &CubeCell{Key: key, Labels: map[string]*LabelStats{}}
			index[cellKey(key)] = cell
			c.Cells = append(c.Cells, cell)
		}
		cell.Items += s.Count
		ls := cell.Labels[s.Label]
		if ls == nil {
			ls = &LabelStats{}
			cell.Labels[s.Label] = ls
		}
		ls.Count += s.Count
		ls.RatingCount += s.Rating.Count
		ls.exact = ls.exact.Add(s.Rating.Scaled, s.Rating.Count)
		for _, q := range s.Quotes {
			ls.Quotes = keepBest(ls.Quotes, Quote{
				ID: q.ID, Confidence: q.Confidence, Rating: q.Rating,
				Text: quoteText(q.Text, DefaultQuoteRunes), Where: key,
			}, DefaultQuotes)
		}
	}
	c.Sort()
	return c, t, counts, nil
}

// agreesWithTally says whether every cell has ndims group fields and the
// cells add up to the tally's items, labels, groups and ratings, and to
// the done items.
func agreesWithTally(sc pipeline.StoredCube, t pipeline.Tally, done, ndims int) bool {
	sum := pipeline.Tally{
		Labels: map[string]int64{}, Groups: map[string]map[string]map[string]int64{},
		Ratings: map[string]pipeline.RatingSum{},
	}
	for _, s := range sc.Cells {
		if len(s.Groups) != ndims || s.Count <= 0 {
			return false
		}
		sum.Items += s.Count
		sum.Labels[s.Label] += s.Count
		for field, value := range s.Groups {
			if sum.Groups[field] == nil {
				sum.Groups[field] = map[string]map[string]int64{}
			}
			if sum.Groups[field][value] == nil {
				sum.Groups[field][value] = map[string]int64{}
			}
			sum.Groups[field][value][s.Label] += s.Count
		}
		sum.Ratings[s.Label] = sum.Ratings[s.Label].Add(s.Rating.Scaled, s.Rating.Count)
	}
	return t.Items == int64(done) && len(sum.Diff(t)) == 0
}
