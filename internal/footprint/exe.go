// Package footprint keeps a short run's resident set near what its work
// needs: the executable's pages that only the packages' initialisation
// touched are handed back, and the Go runtime's memory limit follows the
// live heap from a floor, so that a small heap is collected before the
// runtime's default pace lets it double.
//
// Both exist for a night's run on a big database (a few thousand items):
// its resident set is a few tens of megabytes, of which the binary's
// pages and the heap's growth between collections are most. Neither
// changes what a run computes; on a large run the limit follows the live
// heap and never binds.
package footprint

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// span is one mapping of the executable, [lo, hi) in the address space.
type span struct{ lo, hi uintptr }

// readOnlySpans returns the mappings of the file with inode ino that are
// read-only and private (code and read-only data) and hold no page of
// their own, resident or swapped ("Anonymous: 0 kB" and "Swap: 0 kB"),
// from /proc/self/smaps' text. Releasing such a mapping loses nothing:
// every page of it reads back from the file as it was. A mapping that was
// ever written (relocations made read-only after the loader wrote them)
// has pages of its own, in memory or in swap, and is left alone, as is
// anything writable or shared, or a mapping whose fields were not both
// read.
func readOnlySpans(smaps io.Reader, ino uint64) []span {
	var out []span
	var cur *span
	var anon, swap bool // cur's fields read, each "0 kB"
	flush := func() {
		if cur != nil && anon && swap {
			out = append(out, *cur)
		}
		cur, anon, swap = nil, false, false
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if header(f) {
			flush()
			if len(f) < 6 || (f[1] != "r-xp" && f[1] != "r--p") {
				continue
			}
			if n, err := strconv.ParseUint(f[4], 10, 64); err != nil || n != ino {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if !ok || err1 != nil || err2 != nil || h <= l {
				continue
			}
			cur = &span{uintptr(l), uintptr(h)}
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Anonymous:":
			anon = f[1] == "0"
		case "Swap:":
			swap = f[1] == "0"
		}
	}
	if sc.Err() == nil {
		flush()
	}
	return out
}

// header reports whether smaps' line f starts a mapping ("lo-hi perms
// offset dev inode [path]") rather than giving one of its fields ("Rss:").
func header(f []string) bool {
	return len(f) >= 5 && !strings.HasSuffix(f[0], ":") && strings.Contains(f[0], "-")
}
