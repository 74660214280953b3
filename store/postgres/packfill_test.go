package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// jsonOrBinaryRecord is a reference reader's decoding of a stored
// record: encoding/json's of one stored as JSON.
func jsonOrBinaryRecord(db *DB, id string, raw []byte, r *pipeline.Record) error {
	if len(raw) > 0 && raw[0] == tagRecord {
		return decodeBinaryRecord(raw, r, nil)
	}
	if len(raw) > 0 && raw[0] == tagNamedRecord {
		return decodeNamedRecord(raw, id, db.names, r, nil)
	}
	return json.Unmarshal(raw, r)
}

// asSchema12 stores every record and output as a sawtooth of schema 12
// (today's main before pack.go) stored it: records as json.Marshal
// wrote them; outputs whole, or marked at the stages marks allows when
// they repeat their text (mark.go's markText, as its commits did).
func asSchema12(t testing.TB, url string) {
	t.Helper()
	rewriteAllOutputs(t, url, func(stages []pipeline.StageDef, si int, data []byte, text string) ([]byte, error) {
		out, err := unmark(data, text)
		if err == nil && marks(stages, si) {
			out = markText(out, text)
		}
		return out, err
	})
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var ids []string
	var recs [][]byte
	var id string
	var record []byte
	rows, _ := conn.Query(ctx, `SELECT item_id, record FROM `+DefaultSchema+`.item`)
	if _, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
		var r pipeline.Record
		if err := decodeRecord(record, &r); err != nil {
			return err
		}
		js, err := json.Marshal(r)
		ids, recs = append(ids, id), append(recs, js)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE `+DefaultSchema+`.item i SET record = k.record
		FROM unnest($1::text[], $2::bytea[]) AS k(id, record) WHERE i.item_id = k.id`, ids, recs); err != nil {
		t.Fatal(err)
	}
}

// TestMigrate_Packed: a pipeline as schema 12 stored it (JSON records,
// outputs whole or marked) has its records stored binary and its
// outputs packed when a writable open migrates it, every one shorter
// than before, and exports byte for byte as before.
func TestMigrate_Packed(t *testing.T) {
	u, before, _ := toMigrate(t)
	asSchema12(t, u)
	downgrade(t, u, 12)
	type row struct {
		stage int
		data  []byte
	}
	old := map[string][]row{}
	for si := range storetest.Stages {
		for id, data := range rawOutputs(t, u, si) {
			if isPacked(data) {
				t.Fatalf("the schema-12 pipeline holds a packed output of %s", id)
			}
			old[id] = append(old[id], row{si, data})
		}
	}
	oldRecs := rawRecords(t, u)
	for id, r := range oldRecs {
		if r[0] != '{' {
			t.Fatalf("the schema-12 pipeline holds a record of %s that is not JSON: %q", id, r)
		}
	}

	db := openMigrated(t, u)
	packed := 0
	for id, rows := range old {
		for _, r := range rows {
			now := rawOutputs(t, u, r.stage)[id]
			if len(now) > len(r.data) {
				t.Errorf("output %s/%d grew: %q -> %q", id, r.stage, r.data, now)
			}
			if isPacked(now) {
				packed++
			}
		}
	}
	if packed == 0 {
		t.Error("no output stored packed after the migration")
	}
	for id, r := range rawRecords(t, u) {
		if r[0] != tagNamedRecord || len(r) >= len(oldRecs[id]) { // binary at step 13, numbered names at 18
			t.Errorf("record of %s after the migration: %q (before %q)", id, r, oldRecs[id])
		}
	}
	sameExports(t, db, before)
	storetest.Invariants(t, db)
}

// rawRecords is what the item table holds, by item.
func rawRecords(t testing.TB, url string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT item_id, record FROM `+DefaultSchema+`.item`)
	out := map[string][]byte{}
	var id string
	var record []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
		out[id] = bytes.Clone(record)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrate_PackedLeavesDamagedRows: a schema-12 pipeline with a
// damaged output and a damaged record (which it opened, and whose items
// only their readers refused) migrates: those rows stay as they are,
// read as damaged as before, and every other row is stored packed.
func TestMigrate_PackedLeavesDamagedRows(t *testing.T) {
	u, _, _ := toMigrate(t)
	asSchema12(t, u)
	badOut := []byte{markEscaped, 0xff, 0xff}
	badRec := []byte(`{"id":"B01","text":`)
	sql(t, u, `UPDATE output SET data = $1 WHERE item_id = 'a00' AND stage = 0`, badOut)
	sql(t, u, `UPDATE item SET record = $1 WHERE item_id = 'B01'`, badRec)
	downgrade(t, u, 12)

	db := openMigrated(t, u)
	if got := rawOutputs(t, u, 0)["a00"]; !bytes.Equal(got, badOut) {
		t.Errorf("the damaged output became %q", got)
	}
	recs := rawRecords(t, u)
	if !bytes.Equal(recs["B01"], badRec) {
		t.Errorf("the damaged record became %q", recs["B01"])
	}
	if r := recs["c02"]; r[0] != tagNamedRecord {
		t.Errorf("the record of c02 was not stored binary: %q", r)
	}
	if !isPacked(rawOutputs(t, u, 1)["c02"]) {
		t.Errorf("the classify output of c02 was not packed")
	}
	if _, err := db.Locate("a00"); err == nil {
		t.Error("Locate of the item with the damaged output: no error")
	}
}
