package store

import (
	bolt "go.etcd.io/bbolt"
)

// How full bbolt packs a page it splits. bbolt splits a page only when a
// commit makes it outgrow its size, at the bucket's FillPercent, and never
// merges pages that only grew, so the fill a bucket ends with follows the
// order of its writes:
//   - appendFill: each key a transaction puts in the bucket sorts after
//     every key in it (an ingest in id order, a queue's sequence).
//     Nothing is written behind those pages again, so they are left full.
//   - mixedFill: some key lands among existing ones (outputs committed as
//     items finish, a few hundred ids behind the newest, or an overwrite).
//     Pages behind the newest take more keys later and split again; a
//     page left full would split into a full page and a sliver each time.
//     Replaying the writes of a 100,000-item run, out/classify and
//     out/aggregate took 15.7 MB of pages at 0.6, 17.2 MB at 0.9 and
//     22.3 MB at 1.0.
//   - fillPercent: a bucket written by direct Puts, not through put: the
//     state bucket, whose records grow by a byte when an item's output is
//     shared, which pages left full would meet by splitting in half.
//   - repackFill: a commit that packs the pages of settled outputs
//     (settle.go). Above 1, bbolt's rebalance joins every page the
//     commit deleted a key from into its left neighbour (it joins a page
//     of at most pageSize*FillPercent/2 bytes: 1,024 pages' worth, more
//     than a commit's pages hold), and its split packs them at 1.0 (it
//     caps FillPercent there).
const (
	appendFill  = 1.0
	mixedFill   = 0.6
	fillPercent = 0.9
	repackFill  = 2048
)

// allocSize is how far bbolt grows the file past its last page when a
// commit needs more room, so a file ends up to allocSize (and a page)
// past its pages.
// bbolt's default, 16 MB, left a 100,000-item run's file 4.4 MB past its
// pages (6.5% of it), and up to 16 MB at any size; 1 MB left 0.33-0.85
// MB past the pages of a 52 MB file (a 100,000-item run of prose). Each
// step costs one truncate and fsync, beside the two fdatasyncs of every
// commit: 256 KB is ~200 of them in a 100,000-item run; the run's user
// time stayed the same (bench/RESULTS.md).
const allocSize = 256 << 10

// bucket returns a top-level bucket of the write transaction, set to pack
// its pages by fillPercent until put sees its writes.
func (w *writer) bucket(name []byte) *bolt.Bucket {
	b := w.tx.Bucket(name)
	if b != nil {
		if _, seen := w.ordered[b]; !seen {
			b.FillPercent = fillPercent
		}
	}
	return b
}

// put is b.Put, also setting b's FillPercent for this transaction by where
// its keys land: appendFill while each key sorts after every key b holds,
// mixedFill from the first that does not. bbolt reads FillPercent when the
// transaction commits, so the last setting holds for all of b's pages this
// transaction splits. (Seek rather than Last: Last never returns on a
// bucket of several pages whose keys this transaction deleted, bbolt
// v1.5.0.)
func (w *writer) put(b *bolt.Bucket, k, v []byte) error {
	ordered, seen := w.ordered[b]
	if ordered || !seen {
		next, _ := b.Cursor().Seek(k)
		ordered = next == nil
		if w.ordered == nil {
			w.ordered = map[*bolt.Bucket]bool{}
		}
		w.ordered[b] = ordered
		b.FillPercent = mixedFill
		if ordered {
			b.FillPercent = appendFill
		}
	}
	return b.Put(k, v)
}
