package store

import "testing"

// TestDict_str: the cache finds every id it was given, dense or past the
// cap (a damaged file's), says so for ids it was not, and an id past the
// cap does not grow the dense table.
func TestDict_str(t *testing.T) {
	d := newDict()
	given := map[uint64]string{1: "bug", 2: "app", 7: "gemini-2.5-flash", dictMaxEntries: "last", dictMaxEntries + 1: "past", 1 << 62: "far"}
	for id, s := range given {
		d.add(id, s)
	}
	for _, tc := range []struct {
		name string
		id   uint64
	}{{"first", 1}, {"dense", 2}, {"after a gap", 7}, {"at the cap", dictMaxEntries}, {"past the cap", dictMaxEntries + 1}, {"far past", 1 << 62},
		{"in a gap", 5}, {"zero", 0}, {"never given", 1 << 40}} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := d.str(tc.id)
			want, wantOK := given[tc.id]
			if s != want || ok != wantOK {
				t.Errorf("str(%d) = %q, %v; want %q, %v", tc.id, s, ok, want, wantOK)
			}
			if id, ok := d.id(want); wantOK && (!ok || id != tc.id) {
				t.Errorf("id(%q) = %d, %v; want %d", want, id, ok, tc.id)
			}
		})
	}
	if len(d.byID) > dictMaxEntries+1 {
		t.Errorf("dense table of %d entries, at most %d", len(d.byID), dictMaxEntries+1)
	}
}
