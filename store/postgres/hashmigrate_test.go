package postgres

import (
	"context"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// rawHashes is each item's stored content hash, as its column's type
// reads as text: hex digits at schema 13, \x and the hex of its bytes
// from 14 to 16.
func rawHashes(t testing.TB, url string) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT item_id, content_hash::text FROM `+DefaultSchema+`.item`)
	out := map[string]string{}
	var id, h string
	if _, err := pgx.ForEachRow(rows, []any{&id, &h}, func() error {
		out[id] = h
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// hashStored reports whether the items at url have a content hash
// column (schemas 1 to 16).
func hashStored(t testing.TB, url string) bool {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var stored bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '`+DefaultSchema+`.item'::regclass
		AND attname = 'content_hash' AND NOT attisdropped)`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	return stored
}

// TestMigrate_ContentHashDropped: a pipeline as schema 13 stored it (the
// content hash in hex, one of them no hash at all) loses the column when
// a writable open migrates it (steps 14 and 17): the export is byte for
// byte as before, ingesting the same records again finds every one
// unchanged (the hash ingest derives from the stored record equals the
// given one's) and an edited one changed.
func TestMigrate_ContentHashDropped(t *testing.T) {
	u, before, recs := toMigrate(t)
	downgrade(t, u, 13)
	for id, h := range rawHashes(t, u) {
		if _, err := hex.DecodeString(h); err != nil || len(h) != 0 {
			t.Errorf("hash of %s in the schema-13 fixture: %q, want the empty hex of downgradeStoredHash", id, h)
		}
	}
	sql(t, u, `UPDATE item SET content_hash = 'not hex' WHERE item_id = 'a00'`)

	db := openMigrated(t, u)
	if hashStored(t, u) {
		t.Error("item still has its content_hash column after the migration")
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
	storetest.Invariants(t, db)
}

// TestMigrate_ContentHashStepRunsAgain: steps 14 to 17 run again on a
// pipeline of this version whose version alone was set back to 13 (no
// content_hash column) leave it without one, and ingest still finds the
// records unchanged.
func TestMigrate_ContentHashStepRunsAgain(t *testing.T) {
	u, before, recs := toMigrate(t)
	sql(t, u, `UPDATE meta SET value = '13' WHERE key = 'schema'`)

	db := openMigrated(t, u)
	if hashStored(t, u) {
		t.Error("item has a content_hash column after the steps ran again")
	}
	sameExports(t, db, before)
	if st, err := db.Ingest(recs); err != nil || st.Unchanged != len(recs) {
		t.Errorf("ingesting the same records again: %+v, %v; want all %d unchanged", st, err, len(recs))
	}
}
