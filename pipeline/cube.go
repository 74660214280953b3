package pipeline

// CubeQuotes is how many quotes per label and cell a stored cube answers
// for exactly: the most confident items, ties by id (report's default).
const CubeQuotes = 3

// StoredCube is the per-period aggregate a store keeps exact in the
// commit that folds an item into the tally: one cell per combination of
// a fact's group values (the aggregate stage's group fields, "month"
// among them when grouped by) and label.
type StoredCube struct {
	// Cells are in no particular order.
	Cells []StoredCell
	// Tally and Counts, when not nil, are the tally and the item counts
	// (done, dead, queued) in the state the cells were read from. A
	// store other processes write to while it is read (PostgreSQL under
	// a live fleet) reads them with the cells in one snapshot: a tally
	// and counts read apart would differ from the cells, and from each
	// other, by what was folded in between.
	Tally  *Tally
	Counts *Counts
}

// StoredCell is the items of one label sharing one value per group field.
type StoredCell struct {
	// Groups are the facts' group values, by field.
	Groups map[string]string
	Label  string
	// Count is the items folded in.
	Count int64
	// Rating sums the ratings of those that have one, exactly.
	Rating RatingSum
	// Quotes are the cell's most confident items, most confident first,
	// ties by id: min(Count, CubeQuotes) of them.
	Quotes []CubeQuote
}

// CubeQuote is one item a cell quotes.
type CubeQuote struct {
	ID string
	// Confidence is the classify output's confidence (0 without one).
	Confidence float64
	// Rating is the fact's rating, nil without one.
	Rating *float64
	// Text is the item's whole text, as ForEachDone gives it.
	Text string
}

// CubeReader is the capability of a store that keeps a StoredCube. A
// store without it (or whose cube cannot answer) leaves a report to
// stream every done item instead.
type CubeReader interface {
	// StoredCube returns the cube; ok is false when the store holds none
	// it can vouch for (not built yet, or a cell that removals left with
	// fewer quotes than it must have until the cube is rebuilt).
	StoredCube() (c StoredCube, ok bool, err error)
}
