package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// offline is a DB without a server, for the record codecs: it knows no
// field numbers, and a record that names one does not read.
var offline = &DB{names: newFieldNames(nil)}

// numbered is a cache of field numbers without a server: names[i] is
// numbered i+1.
func numbered(names ...string) *fieldNames {
	n := newFieldNames(nil)
	for i, name := range names {
		n.byName[name], n.byNum[uint64(i+1)] = uint64(i+1), name
	}
	n.publish()
	return n
}

// TestEncodeNamedRecord: a record whose names all have numbers is stored
// without its id and with its names as numbers, shorter than the form
// of step 13 by at least its id and reading back as that form does
// (its id the row's); one with a name without a number is stored in the
// form of step 13 exactly, and one with invalid UTF-8 as JSON.
func TestEncodeNamedRecord(t *testing.T) {
	all := map[string]bool{}
	for _, r := range recordCases {
		for k := range r.Fields {
			all[k] = true
		}
		for k := range r.Types {
			all[k] = true
		}
	}
	names := numbered(slices.Sorted(maps.Keys(all))...)
	db := &DB{names: names}
	for _, r := range recordCases {
		old, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		var want pipeline.Record
		if err := decodeRecord(old, &want); err != nil {
			t.Fatal(err)
		}
		b, err := encodeNamedRecord(r, names)
		if err != nil {
			t.Fatal(err)
		}
		if named := b[0] == tagNamedRecord; named != recordUTF8(r) {
			t.Errorf("%+v stored with numbered names: %v", r, named)
		} else if named && len(b) > len(old)-len(r.ID)-1 {
			t.Errorf("%+v: %d bytes with numbered names, %d with names", r, len(b), len(old))
		} else if !named && string(b) != string(old) {
			t.Errorf("%+v: stored %q, want the form of step 13 %q", r, b, old)
		}
		var got pipeline.Record
		if err := db.readRecord(r.ID, b, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("readRecord(encodeNamedRecord(%+v)) = %+v, %v; want %+v", r, got, err, want)
		}
		keys, wantKeys := map[string]bool{"old": true}, map[string]bool{"old": true}
		for k := range want.Fields {
			wantKeys[k] = true
		}
		if err := db.recordFieldKeys(r.ID, b, keys); err != nil || !reflect.DeepEqual(keys, wantKeys) {
			t.Errorf("recordFieldKeys = %v, %v; want %v", keys, err, wantKeys)
		}
		if b[0] == tagNamedRecord {
			if err := decodeRecord(b, &got); err != errNamedRecord {
				t.Errorf("decodeRecord of a record with numbered names: %v, want errNamedRecord", err)
			}
		}
		if b[0] == tagNamedRecord && len(r.Fields)+len(r.Types) > 0 {
			if err := offline.readRecord(r.ID, b, &got); err == nil {
				t.Errorf("a record with numbered names read without its numbers: %+v", got)
			}
		}
	}

	// A name without a number: the form of step 13.
	r := pipeline.Record{ID: "r7", Text: "t", Fields: map[string]string{"app": "x", "unnumbered": "y"}}
	b, _ := encodeNamedRecord(r, numbered("app"))
	if old, _ := encodeRecord(r); string(b) != string(old) {
		t.Errorf("a record with an unnumbered name stored %q, want %q", b, old)
	}
}

func FuzzNamedRecord(f *testing.F) {
	names := numbered("app", "date", "n", "")
	for _, r := range recordCases {
		if b, _ := encodeNamedRecord(r, names); b[0] == tagNamedRecord {
			f.Add(b)
		}
	}
	f.Add([]byte{tagNamedRecord, 0, 1, 9, 0, 0, 0})
	db := &DB{names: names}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || raw[0] != tagNamedRecord {
			return
		}
		var r pipeline.Record
		err := db.readRecord("id", raw, &r)
		keys := map[string]bool{}
		kerr := db.recordFieldKeys("id", raw, keys)
		if err != nil {
			return
		}
		if kerr != nil || len(keys) != len(r.Fields) {
			t.Fatalf("recordFieldKeys(%q) = %v, %v; the record's fields %v", raw, keys, kerr, r.Fields)
		}
		// What decodes is a record that stores and reads back the same
		// (with invalid UTF-8 it is stored as JSON, which replaces it).
		b, err := encodeNamedRecord(r, names)
		var back pipeline.Record
		if err != nil || db.readRecord("id", b, &back) != nil || !reflect.DeepEqual(back, r) && recordUTF8(r) {
			js, _ := json.Marshal(r)
			t.Fatalf("%s read back as %+v", js, back)
		}
	})
}

// unnameRecords stores every record of the pipeline at url as schema 17
// did, its id and its names written out (encodeRecord), and drops
// field_name: the first move of every fixture that stores a pipeline as
// an older sawtooth did. A pipeline already without field_name is left
// as it is.
func unnameRecords(t testing.TB, url string) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET search_path = `+DefaultSchema); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('field_name') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return
	}
	db := &DB{names: newFieldNames(nil)}
	if err := db.names.load(ctx, conn); err != nil {
		t.Fatal(err)
	}
	rows, _ := conn.Query(ctx, `SELECT item_id, record FROM item WHERE get_byte(record, 0) = $1`, int(tagNamedRecord))
	var ids []string
	var recs [][]byte
	var id string
	var raw []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		var r pipeline.Record
		if err := db.readRecord(id, raw, &r); err != nil {
			return fmt.Errorf("item %q: %w", id, err)
		}
		b, err := encodeRecord(r)
		ids, recs = append(ids, id), append(recs, b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE item i SET record = k.record
		FROM unnest($1::text[], $2::bytea[]) AS k(id, record) WHERE i.item_id = k.id`, ids, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DROP TABLE field_name`); err != nil {
		t.Fatal(err)
	}
}

// downgrade stores the pipeline at url as schema v did: its records
// without numbered names, then downgrades[v].
func downgrade(t testing.TB, url string, v int) {
	t.Helper()
	unnameRecords(t, url)
	sql(t, url, downgrades[v])
}

// BenchmarkDecodeNamedRecord decodes a review's record as step 18
// stores it (its names by number), whole as the rows read it and its
// field names only as FieldNames reads them.
func BenchmarkDecodeNamedRecord(b *testing.B) {
	r := pipeline.Record{ID: "r000007", Text: "The sleep timer stops after 10 minutes every night.", Line: 7,
		Fields: map[string]string{"app": "sleep-sounds", "date": "2025-12-16", "locale": "en", "rating": "3", "version": "1.12.1"},
		Types:  map[string]pipeline.FieldType{"rating": pipeline.FieldNumber}}
	names := numbered("app", "date", "locale", "rating", "version")
	raw, err := encodeNamedRecord(r, names)
	if err != nil || raw[0] != tagNamedRecord {
		b.Fatal("not a named record", err)
	}
	b.Run("record", func(b *testing.B) {
		b.ReportAllocs()
		var got pipeline.Record
		for b.Loop() {
			if err := decodeNamedRecord(raw, r.ID, names, &got, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("names", func(b *testing.B) {
		b.ReportAllocs()
		keys := map[string]bool{}
		for b.Loop() {
			if err := decodeNamedRecord(raw, r.ID, names, nil, keys); err != nil {
				b.Fatal(err)
			}
		}
	})
}
