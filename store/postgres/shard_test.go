package postgres

import "testing"

// TestNextShard_StartsAtRandom: handles opened together do not step
// through the counter shards in lockstep (twenty all starting on the
// same shard by chance: one in 16^19).
func TestNextShard_StartsAtRandom(t *testing.T) {
	first := map[int16]bool{}
	for range 20 {
		var db DB
		s := db.nextShard()
		if next := db.nextShard(); next != (s+1)%shards {
			t.Fatalf("a handle's shards go %d, %d; want each next to the one before", s, next)
		}
		first[s] = true
	}
	if len(first) == 1 {
		t.Fatalf("twenty handles all started at shard %v", first)
	}
}
