package postgres

import (
	"context"
	"encoding/hex"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// rawHashes is each item's stored content hash, as its column's type
// reads as text: hex digits at schema 13, \x and the hex of its bytes
// from 14 on; and the bytes the column takes.
func rawHashes(t testing.TB, url string) (map[string]string, int64) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT item_id, content_hash::text, pg_column_size(content_hash) FROM `+DefaultSchema+`.item`)
	out := map[string]string{}
	var total int64
	var id, h string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &h, &n}, func() error {
		out[id] = h
		total += n
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out, total
}

// TestMigrate_ContentHashBytes: a pipeline as schema 13 stored it (the
// content hash in hex) has each hash stored as its 16 bytes when a
// writable open migrates it: the column takes about half the bytes,
// the export is byte for byte as before, ingesting the same records
// again finds every one unchanged (the migrated hash compares equal)
// and an edited one changed, and a hash no sawtooth wrote becomes one
// no record matches, whose record the next ingest stores again.
func TestMigrate_ContentHashBytes(t *testing.T) {
	u, before, recs := toMigrate(t)
	sql(t, u, downgrades[13])
	sql(t, u, `UPDATE item SET content_hash = 'not hex' WHERE item_id = 'a00'`)
	old, oldBytes := rawHashes(t, u)

	db := openMigrated(t, u)
	now, nowBytes := rawHashes(t, u)
	for id, h := range old {
		want := `\x` + h
		if id == "a00" {
			want = `\x`
		}
		if now[id] != want {
			t.Errorf("hash of %s after the migration: %s, want %s", id, now[id], want)
		}
		if _, err := hex.DecodeString(h); id != "a00" && (err != nil || len(h) != 32) {
			t.Errorf("hash of %s at schema 13: %q, not 16 bytes in hex", id, h)
		}
	}
	if 2*nowBytes > oldBytes+int64(len(old)) {
		t.Errorf("content hashes take %d bytes after the migration, %d before: want about half", nowBytes, oldBytes)
	}
	sameExports(t, db, before)

	edited := recs[1]
	edited.Fields = map[string]string{"app": "an edit"}
	for i, r := range recs {
		if r.ID == edited.ID {
			recs[i] = edited
		}
	}
	st, err := db.Ingest(recs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unchanged != len(recs)-1 || st.New != 0 || st.Changed+st.Updated != 1 {
		t.Errorf("ingesting the records again after the migration, %s edited: %+v; want %d unchanged, 1 changed or updated", edited.ID, st, len(recs)-1)
	}
	if h, _ := rawHashes(t, u); h["a00"] == `\x` {
		t.Error("the record of a00, whose hash was no hash, was not stored again")
	}
	storetest.Invariants(t, db)
}

// TestMigrate_ContentHashStepRunsAgain: step 14 run again on hashes
// already stored as bytes (a pipeline whose version alone was set back
// to 13) leaves them as they are, and ingest still finds the records
// unchanged.
func TestMigrate_ContentHashStepRunsAgain(t *testing.T) {
	u, before, recs := toMigrate(t)
	hashes, _ := rawHashes(t, u)
	sql(t, u, `UPDATE meta SET value = '13' WHERE key = 'schema'`)

	db := openMigrated(t, u)
	if now, _ := rawHashes(t, u); !maps.Equal(now, hashes) {
		t.Errorf("hashes after the step ran again:\n%v\nbefore:\n%v", now, hashes)
	}
	sameExports(t, db, before)
	if st, err := db.Ingest(recs); err != nil || st.Unchanged != len(recs) {
		t.Errorf("ingesting the same records again: %+v, %v; want all %d unchanged", st, err, len(recs))
	}
}
