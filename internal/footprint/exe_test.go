package footprint

import (
	"strings"
	"testing"
)

func TestReadOnlySpans(t *testing.T) {
	const smaps = `00400000-010f0000 r-xp 00000000 fe:00 42                           /usr/bin/sawtooth
Size:              13248 kB
Rss:               10304 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me
010f0000-020a7000 r--p 00cf0000 fe:00 42                           /usr/bin/sawtooth
Rss:               11100 kB
Anonymous:             0 kB
Swap:                  0 kB
020a7000-0223d000 rw-p 01ca7000 fe:00 42                           /usr/bin/sawtooth
Rss:                 664 kB
Anonymous:           160 kB
0223d000-0223e000 r--p 01e3d000 fe:00 42                           /usr/bin/sawtooth
Rss:                   4 kB
Anonymous:             4 kB
7f0000000000-7f0010000000 r--s 00000000 fe:00 77                   /data/night.db
Rss:               10504 kB
Anonymous:             0 kB
7f0020000000-7f0020100000 r-xp 00000000 fe:00 91                   /usr/lib/libc.so.6
Rss:                 824 kB
Anonymous:             0 kB
Swap:                  0 kB
c000000000-c004000000 rw-p 00000000 00:00 0
Rss:               24644 kB
Anonymous:         24644 kB
7f0030000000-7f0030010000 r--p 00000000 fe:00 93                   /usr/bin/sawtooth-pie
Rss:                   0 kB
Anonymous:             0 kB
Swap:                 64 kB
VmFlags: rd mr mw me ac
7f0030010000-7f0030020000 r-xp 00010000 fe:00 93                   /usr/bin/sawtooth-pie
Rss:                  32 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me
7f0030020000-7f0030030000 r--p 00020000 fe:00 93                   /usr/bin/sawtooth-pie
Rss:                  32 kB
Anonymous:             0 kB
`
	tests := []struct {
		name string
		ino  uint64
		want []span
	}{
		{"the executable's code and read-only data", 42, []span{{0x400000, 0x10f0000}, {0x10f0000, 0x20a7000}}},
		{"a shared mapping is not private", 77, nil},
		{"another file's code", 91, []span{{0x7f0020000000, 0x7f0020100000}}},
		{"no such file", 5, nil},
		// Relocations written after the loader mapped the file, then
		// swapped out: the mapping's own pages are in swap, not resident.
		{"pages of its own in swap are kept; a mapping cut short is kept", 93, []span{{0x7f0030010000, 0x7f0030020000}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readOnlySpans(strings.NewReader(smaps), tc.ino)
			if len(got) != len(tc.want) {
				t.Fatalf("spans %x, want %x", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("spans %x, want %x", got, tc.want)
				}
			}
		})
	}
}
