package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Defaults of a Cube's quotes.
const (
	// DefaultQuotes is how many reviews are quoted per label in each cell.
	DefaultQuotes = 3
	// DefaultQuoteRunes is the length, in characters, a quote is cut to.
	DefaultQuoteRunes = 240
)

// Review is one done item as the pivot and the quotes see it: its label
// and confidence from classify, its rating, and its value for each group
// field ("month" as 2006-01).
type Review struct {
	ID         string
	Label      string
	Confidence float64
	// Rating is nil when the item has no numeric rating.
	Rating *float64
	// Groups holds the item's value for each of the cube's Dims; a missing
	// one counts as "unknown".
	Groups map[string]string
	// Text is the review's text; the cube keeps a cut copy of a few.
	Text string
}

// Cube is the exact label counts, rating sums and best quotes of done
// items, by every combination of its Dims' values (one cell per
// combination that has items). Pivots of any subset of Dims over any
// month window are sums of its cells, so one pass over the items answers
// them all, and its memory grows with the number of cells, never with the
// number of items: each cell keeps at most Quotes quotes per label.
//
// A Cube is not safe for concurrent use. Its JSON form (dims, cells) is
// part of `report --format json`.
type Cube struct {
	// Dims are the group fields cells are keyed by, "month" included.
	Dims []string `json:"dims"`
	// Where lists the filters the items passed ("app=TaskFlow"), for display.
	Where []string `json:"where,omitempty"`
	// Cells are in key order after Sort (Load and Build call it).
	Cells []*CubeCell `json:"cells"`
	// Quotes is how many quotes a cell keeps per label; 0 means DefaultQuotes.
	Quotes int `json:"-"`
	// QuoteRunes is the length quotes are cut to; 0 means DefaultQuoteRunes.
	QuoteRunes int `json:"-"`

	index map[string]*CubeCell
}

// CubeCell is the items sharing one value per Dim.
type CubeCell struct {
	// Key holds the cell's value for each of the cube's Dims, in order.
	Key    []string               `json:"key"`
	Items  int64                  `json:"items"`
	Labels map[string]*LabelStats `json:"labels"`
}

// LabelStats is one label's share of a cell.
type LabelStats struct {
	Count int64 `json:"count"`
	// RatingSum and RatingCount cover the items with a rating.
	RatingSum   float64 `json:"rating_sum"`
	RatingCount int64   `json:"rating_count"`
	// Quotes are the most confident items, most confident first, ties by id.
	Quotes []Quote `json:"quotes,omitempty"`

	// exact sums the ratings as the stored cube does; Sort sets RatingSum
	// from it, so a streamed cube and a stored one agree to the last bit
	// whatever order the items came in.
	exact pipeline.RatingSum
}

// Quote is one review quoted in a report.
type Quote struct {
	ID         string   `json:"id"`
	Confidence float64  `json:"confidence"`
	Rating     *float64 `json:"rating,omitempty"`
	// Text is cut to the cube's QuoteRunes, whitespace collapsed and
	// control characters removed; renderers still escape it.
	Text string `json:"text"`
	// Where is the item's group values in the cube's Dims order.
	Where []string `json:"where"`
}

// NewCube returns an empty cube keyed by dims ("month" is added when
// missing: every pivot compares months).
func NewCube(dims []string) *Cube {
	d := slices.Clone(dims)
	if !slices.Contains(d, MonthField) {
		d = append(d, MonthField)
	}
	return &Cube{Dims: d}
}

// MonthField is the group field holding an item's month, 2006-01.
const MonthField = "month"

// unknown is the group value of an item that lacks the field.
const unknown = "unknown"

func cellKey(values []string) string {
	var b strings.Builder
	for _, v := range values {
		fmt.Fprintf(&b, "%d:%s", len(v), v)
	}
	return b.String()
}

// Add folds one review into its cell.
func (c *Cube) Add(r Review) {
	if c.index == nil {
		c.index = map[string]*CubeCell{}
		for _, cell := range c.Cells {
			c.index[cellKey(cell.Key)] = cell
		}
	}
	key := make([]string, len(c.Dims))
	for i, d := range c.Dims {
		key[i] = cmp.Or(strings.TrimSpace(r.Groups[d]), unknown)
	}
	k := cellKey(key)
	cell := c.index[k]
	if cell == nil {
		cell = &CubeCell{Key: key, Labels: map[string]*LabelStats{}}
		c.index[k] = cell
		c.Cells = append(c.Cells, cell)
	}
	cell.Items++
	ls := cell.Labels[r.Label]
	if ls == nil {
		ls = &LabelStats{}
		cell.Labels[r.Label] = ls
	}
	ls.Count++
	if r.Rating != nil {
		ls.RatingSum += *r.Rating
		ls.RatingCount++
		if scaled, ok := pipeline.ScaledRating(*r.Rating); ok {
			ls.exact = ls.exact.Add(scaled, 1)
		}
	}
	q := Quote{ID: r.ID, Confidence: r.Confidence, Rating: r.Rating, Where: key}
	ls.Quotes = keepBest(ls.Quotes, q, cmp.Or(c.Quotes, DefaultQuotes))
	// Cut the text only when the quote was kept: most items are not.
	for i := range ls.Quotes {
		if ls.Quotes[i].ID == r.ID && ls.Quotes[i].Text == "" {
			ls.Quotes[i].Text = quoteText(r.Text, cmp.Or(c.QuoteRunes, DefaultQuoteRunes))
		}
	}
}

// Sort puts the cells in key order and sets each rating sum from its
// exact sum, so output never depends on the order items were read in.
func (c *Cube) Sort() {
	for _, cell := range c.Cells {
		for _, ls := range cell.Labels {
			// A cube read from JSON has no exact sums: keep its floats.
			if ls.exact.Count > 0 && ls.exact.Count == ls.RatingCount {
				ls.RatingSum = ls.exact.Sum()
			}
		}
	}
	slices.SortFunc(c.Cells, func(a, b *CubeCell) int { return slices.Compare(a.Key, b.Key) })
}

// quoteBefore orders quotes: highest confidence first, ties by id.
func quoteBefore(a, b Quote) int {
	return cmp.Or(cmp.Compare(b.Confidence, a.Confidence), cmp.Compare(a.ID, b.ID))
}

// keepBest inserts q into qs (sorted by quoteBefore) and keeps the best n.
func keepBest(qs []Quote, q Quote, n int) []Quote {
	i, _ := slices.BinarySearchFunc(qs, q, quoteBefore)
	if i >= n {
		return qs
	}
	qs = slices.Insert(qs, i, q)
	if len(qs) > n {
		qs = qs[:n]
	}
	return qs
}

// quoteText collapses whitespace, drops control and format characters
// (terminal escapes, bidi overrides) and cuts s to at most n characters at
// a word boundary, marking the cut with an ellipsis.
func quoteText(s string, n int) string {
	var b strings.Builder
	space := false
	runes := 0
	for _, r := range s {
		if r == utf8.RuneError || hiddenFormat(r) {
			continue
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			runes++
			space = false
		}
		b.WriteRune(r)
		runes++
		if runes > n+1 {
			break
		}
	}
	out := b.String()
	if utf8.RuneCountInString(out) <= n {
		return out
	}
	rs := []rune(out)[:n]
	cut := string(rs)
	if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,.;:") + "…"
}

// UnmarshalJSON reads a cube and drops its index, rebuilt on the next Add.
func (c *Cube) UnmarshalJSON(b []byte) error {
	type plain Cube
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = Cube(p)
	c.index = nil
	return nil
}
