package pipeline

// Restorer is how `sawtooth copy` moves a pipeline between stores (bbolt
// and PostgreSQL, either way): it writes items' whole stored state into
// a store that does not hold them yet. Both stores implement it.
type Restorer interface {
	// Restore stores each item exactly as its Location says, in one
	// transaction: its record, every output, where it is (queued at
	// Stage, in the order given; dead at Stage with Dead; or done, its
	// fact folded into the tally) and its dead-letter history with the
	// original retire times and reasons. An id the store already holds
	// is an error, and nothing is written.
	Restore(items []Location) error
	// AddUsage adds u to the stages' recorded token totals.
	AddUsage(u map[string]Usage) error
}
