package store

import (
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// pagesInUse is the bytes of src's pages that are not on its free list:
// about what a compacted copy of it can take at most (bbolt.Compact
// fills its pages, so the copy is often smaller).
func pagesInUse(src *bolt.DB) int64 {
	var size int64
	if err := src.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		return 0
	}
	free := int64(src.Stats().FreePageN) * int64(src.Info().PageSize)
	return max(size-free, 0)
}

// compactFailed is Compact's error when writing the copy failed with
// err. A full disk gets what to do: the copy is written beside the file,
// and a message with the copy's bound and the space there had lets the
// user tell how much to free. free < 0 is a free space not known.
func compactFailed(path, dir string, err error, inUse, free int64) error {
	if !noRoom(err) {
		return fmt.Errorf("compact %s: %w (the database is unchanged)", path, err)
	}
	had := ""
	if free >= 0 {
		had = fmt.Sprintf(", which had %s free,", megabytes(free))
	}
	quota := ""
	if errors.Is(err, quotaExceeded) || strings.Contains(err.Error(), quotaExceeded.Error()) {
		quota = " (or have the disk quota raised)"
	}
	return fmt.Errorf("compact %s: %w: the copy is written beside the file, in %s%s and takes up to %s, the pages the file uses "+
		"(the database is unchanged: free some space there%s, or move the file to a larger disk, then run compact again)",
		path, err, dir, had, megabytes(inUse), quota)
}

// noRoom reports whether err is a write refused for lack of room: the
// disk is full or the user's quota on it is spent. The errors differ by
// system (noRoomErrors), so a message's advice reaches Windows users too.
// bbolt formats some of them into its own text (a grow's truncate, on
// Windows in its mmap step) instead of wrapping them, so the text is
// checked too.
func noRoom(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, e := range noRoomErrors {
		if errors.Is(err, e) || strings.Contains(msg, e.Error()) {
			return true
		}
	}
	return false
}

func megabytes(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
