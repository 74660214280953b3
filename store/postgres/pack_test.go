package postgres

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// refersToText reports whether the stored output data reads differently
// for two texts: it was stored without its item's text.
func refersToText(t testing.TB, data []byte) bool {
	t.Helper()
	a, err := unmark(data, "one text")
	if err != nil {
		t.Fatalf("unmark(%q): %v", data, err)
	}
	b, _ := unmark(data, "another")
	return !bytes.Equal(a, b)
}

// TestPackOutput: outputs the built-in stages write pack to less than
// half, unknown keys and any literal included, and read back byte for
// byte; what would not (whitespace, not an object, invalid JSON) is
// left to be stored as before.
func TestPackOutput(t *testing.T) {
	text := "The team did an amazing job <b>with</b> my budgets & more."
	for _, tc := range []struct {
		name     string
		out      string
		withText bool
		packed   bool
		refers   bool // the packed form refers to the item's text
		maxRatio float64
	}{
		{"sanitize, clean text", string(sanitizeOut(t, text, text, true)), true, true, true, 0.15},
		{"sanitize, HTML kept", string(sanitizeOut(t, text, text, false)), true, true, true, 0.15},
		{"sanitize, no text given", string(sanitizeOut(t, text, text, true)), false, true, false, 0.95},
		{"sanitize, changed text", string(sanitizeOut(t, text, "cleaned "+text, true)), true, true, false, 0.95},
		{"classify", `{"label":"ux","confidence":0.9,"reason":"instant stand-in","model":"none (instant stand-in)","usage":{"prompt_tokens":50,"candidate_tokens":20,"total_tokens":70}}`, false, true, false, 0.6},
		{"aggregate", `{"label":"ux","groups":{"app":"budget-buddy","month":"2025-11"},"rating":5}`, false, true, false, 0.8},
		{"unknown keys, every literal", `{"a\"b":[1,-2,0.5,1e3,null,true,false,"x\u00e9\n",{}],"n":123456789012345678,"big":1234567890123456789,"z":0,"e":[],"o":{"":""}}`, false, true, false, 0.95},
		{"the text as a key is not the text", `{"` + text + `":1,"label":"x"}`, true, true, false, 1},
		{"whitespace", `{"label": "ux"}`, false, false, false, 0},
		{"not an object", `["label","ux"]`, false, false, false, 0},
		{"invalid", `{"label":"ux"`, false, false, false, 0},
		{"a leading zero", `{"n":012}`, false, false, false, 0},
		// Not JSON inside a string or a number: stored as before, so that
		// every reader refuses it as it did (FieldNames' NotObjectError).
		{"a control byte in a string", "{\"label\":\"a\x01b\",\"reason\":\"instant stand-in\"}", false, false, false, 0},
		{"an invalid escape", `{"label":"\q","reason":"instant stand-in"}`, false, false, false, 0},
		{"not a number", `{"confidence":1-2,"reason":"instant stand-in"}`, false, false, false, 0},
		{"trailing bytes", `{"n":1} `, false, false, false, 0},
		{"too deep", `{"a":` + strings.Repeat("[", maxPackDepth+2) + strings.Repeat("]", maxPackDepth+2) + `}`, false, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := packOutput([]byte(tc.out), text, tc.withText)
			if (p != nil) != tc.packed {
				t.Fatalf("packOutput(%s) = %q; want packed %v", tc.out, p, tc.packed)
			}
			if p == nil {
				return
			}
			if r := float64(len(p)) / float64(len(tc.out)); r > tc.maxRatio {
				t.Errorf("packed to %d of %d bytes (%.2f); want at most %.2f", len(p), len(tc.out), r, tc.maxRatio)
			}
			got, err := unmark(p, text)
			if err != nil || string(got) != tc.out {
				t.Fatalf("unmark(packOutput) = %s, %v; want %s", got, err, tc.out)
			}
			if r := refersToText(t, p); r != tc.refers {
				t.Errorf("refers to the text: %v, want %v", r, tc.refers)
			}
			// FieldNames reads the keys without unpacking.
			want, got2 := map[string]bool{}, map[string]bool{}
			if !objectKeys([]byte(tc.out), want) || !packedKeys(p, got2) || !reflect.DeepEqual(got2, want) {
				t.Errorf("packedKeys = %v; want %v", got2, want)
			}
			if !tc.refers && string(storedJSON(p)) != tc.out {
				t.Errorf("storedJSON = %s; want %s", storedJSON(p), tc.out)
			}
		})
	}
}

// TestUnpack_damaged: a packed output cut short or with a kind, key or
// length that does not fit is an error, never a panic or a partial read.
func TestUnpack_damaged(t *testing.T) {
	good := packOutput([]byte(`{"label":"ux","x":[1,"s",{"k":null}],"usage":{"prompt_tokens":5}}`), "", false)
	if good == nil {
		t.Fatal("not packed")
	}
	for n := 1; n < len(good); n++ {
		if _, err := unpack(good[:n], ""); err == nil {
			t.Errorf("unpack of the first %d of %d bytes: no error", n, len(good))
		}
	}
	for _, bad := range [][]byte{
		{tagPacked},
		{tagPacked, 99},
		{tagPacked, kObject, 200, 0},   // a key past the table
		{tagPacked, kString, 50, 'a'},  // a length past the end
		{tagPacked, kObject, 0, kNull}, // trailing bytes
		append([]byte{tagPacked}, bytes.Repeat([]byte{kArray}, maxPackDepth+2)...),
	} {
		if out, err := unpack(bad, ""); err == nil {
			t.Errorf("unpack(%v) = %s, no error", bad, out)
		}
		if packedKeys(bad, map[string]bool{}) {
			t.Errorf("packedKeys(%v) accepted it", bad)
		}
	}
}

func FuzzUnpack(f *testing.F) {
	for _, s := range outputSeeds {
		if p := packOutput([]byte(s), "", false); p != nil {
			f.Add(p)
		}
		f.Add([]byte(s))
	}
	// A packed object whose string holds a control byte: not JSON, which
	// packOutput never writes.
	f.Add([]byte{kObject, 3, 'a', kString, 2, 'x', 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Any output packs to what reads back as itself, or not at all,
		// and only JSON packs.
		if p := packOutput(data, "txt", true); p != nil {
			if back, err := unpack(p, "txt"); err != nil || !bytes.Equal(back, data) {
				t.Fatalf("packOutput(%q) reads back as %q, %v", data, back, err)
			}
			if !json.Valid(data) {
				t.Fatalf("packOutput packed %q, which is not JSON", data)
			}
		}
		// Damaged bytes are an error, not a panic; what unpacks to JSON
		// (as all packOutput writes does) has the keys packedKeys reads.
		out, err := unpack(append([]byte{tagPacked}, data...), "txt")
		keys := map[string]bool{}
		ok := packedKeys(append([]byte{tagPacked}, data...), keys)
		if ok && err != nil {
			t.Fatalf("packedKeys reads %q, which does not unpack: %v", data, err)
		}
		if ok && json.Valid(out) {
			want := map[string]bool{}
			if !objectKeys(out, want) || !reflect.DeepEqual(keys, want) {
				t.Fatalf("packedKeys(%q) = %v; its JSON %s has %v", data, keys, out, want)
			}
		}
	})
}

// recordCases are records as ingest builds them.
var recordCases = []pipeline.Record{
	{ID: "r1", Text: "plain text"},
	{ID: "r2", Text: "émoji 🙏🏾 \"quoted\"\n<b>", Fields: map[string]string{"app": "x", "date": "2025-01-02", "": ""}, Types: map[string]pipeline.FieldType{"n": pipeline.FieldNumber}, Line: 7},
	{ID: "r3", Fields: map[string]string{}, Types: map[string]pipeline.FieldType{}, Line: -4},
	{ID: "", Text: ""},
	{ID: "r5", Text: "bad \xff UTF-8"},
	{ID: "r6", Fields: map[string]string{"k\xfe": "v"}},
}

// TestEncodeRecord: a record is stored binary, shorter than its JSON,
// and reads back as its JSON read (empty maps as none); one with
// invalid UTF-8 is stored as JSON, whose reading replaces those bytes.
func TestEncodeRecord(t *testing.T) {
	for _, r := range recordCases {
		js, _ := json.Marshal(r)
		var want pipeline.Record
		if err := json.Unmarshal(js, &want); err != nil {
			t.Fatal(err)
		}
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if binary := b[0] == tagRecord; binary != recordUTF8(r) {
			t.Errorf("%+v stored binary: %v", r, binary)
		} else if binary && len(b) >= len(js) {
			t.Errorf("%+v: %d bytes binary, %d as JSON", r, len(b), len(js))
		}
		var got pipeline.Record
		if err := decodeRecord(b, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("decodeRecord(encodeRecord(%+v)) = %+v, %v; want %+v", r, got, err, want)
		}
		keys, wantKeys := map[string]bool{"old": true}, map[string]bool{"old": true}
		for k := range want.Fields {
			wantKeys[k] = true
		}
		if err := offline.recordFieldKeys("", b, keys); err != nil || !reflect.DeepEqual(keys, wantKeys) {
			t.Errorf("recordFieldKeys = %v, %v; want %v", keys, err, wantKeys)
		}
	}
}

func FuzzBinaryRecord(f *testing.F) {
	for _, r := range recordCases {
		b, _ := encodeRecord(r)
		f.Add(b)
	}
	f.Add([]byte{tagRecord, 200})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || raw[0] != tagRecord {
			return // JSON: FuzzDecodeRecord's
		}
		var r pipeline.Record
		err := decodeRecord(raw, &r)
		keys := map[string]bool{}
		kerr := offline.recordFieldKeys("", raw, keys)
		if err != nil {
			return
		}
		if kerr != nil || len(keys) != len(r.Fields) {
			t.Fatalf("recordFieldKeys(%q) = %v, %v; the record's fields %v", raw, keys, kerr, r.Fields)
		}
		// What decodes is a record that stores and reads back the same.
		b, _ := encodeRecord(r)
		var back pipeline.Record
		if err := decodeRecord(b, &back); err != nil || !reflect.DeepEqual(back, r) && recordUTF8(r) {
			t.Fatalf("%+v read back as %+v, %v", r, back, err)
		}
	})
}

// BenchmarkDecodeBinaryRecord is BenchmarkDecodeRecord's record stored
// binary.
func BenchmarkDecodeBinaryRecord(b *testing.B) {
	raw, _ := encodeRecord(pipeline.Record{ID: "r000007", Text: "The \"sleep\" timer\nstops after\x00 10 minutes <b>every</b> night.",
		Fields: map[string]string{"app": "sleep-sounds", "date": "2025-12-16", "locale": "en", "rating": "3", "version": "1.12.1"}, Line: 7})
	var r pipeline.Record
	for b.Loop() {
		if err := decodeRecord(raw, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFieldNamesScanPacked is BenchmarkFieldNamesScan's item as
// schema 13 stores it: the record binary, the outputs packed.
func BenchmarkFieldNamesScanPacked(b *testing.B) {
	text := "The team did an amazing job with my budgets. Otherwise fine."
	record, _ := encodeRecord(pipeline.Record{ID: "r000002", Text: text,
		Fields: map[string]string{"app": "budget-buddy", "date": "2025-11-03", "locale": "en", "rating": "5", "version": "2.4.0"}, Line: 2})
	outputs := [][]byte{
		packOutput([]byte(`{"text":"`+text+`","chars":60,"truncated":false,"original_chars":60,"changes":[]}`), text, true),
		packOutput([]byte(`{"label":"ux","confidence":0.9,"reason":"instant stand-in","model":"none (instant stand-in)","usage":{}}`), "", false),
		packOutput([]byte(`{"label":"ux","groups":{"app":"budget-buddy","month":"2025-11"},"rating":5}`), "", false),
	}
	inputs, keys := map[string]bool{}, map[string]bool{}
	for b.Loop() {
		if err := offline.recordFieldKeys("", record, inputs); err != nil {
			b.Fatal(err)
		}
		for _, o := range outputs {
			if !packedKeys(o, keys) {
				b.Fatal("not an object")
			}
		}
	}
}

// BenchmarkUnpack is an export's work on one item's outputs beyond the
// schema 12 one's: unpacking its three outputs.
func BenchmarkUnpack(b *testing.B) {
	text := "The team did an amazing job with my budgets. Otherwise fine."
	outputs := [][]byte{
		packOutput([]byte(`{"text":"`+text+`","chars":60,"truncated":false,"original_chars":60,"changes":[]}`), text, true),
		packOutput([]byte(`{"label":"ux","confidence":0.9,"reason":"instant stand-in","model":"none (instant stand-in)","usage":{"prompt_tokens":50,"candidate_tokens":20,"total_tokens":70}}`), "", false),
		packOutput([]byte(`{"label":"ux","groups":{"app":"budget-buddy","month":"2025-11"},"rating":5}`), "", false),
	}
	for b.Loop() {
		for _, o := range outputs {
			if _, err := unmark(o, text); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkUnmarkSchema12 is BenchmarkUnpack's outputs as schema 12
// stored them, read as ForEachDone read them: the sanitize output
// marked and put back together, the others copied out of the stream's
// buffer.
func BenchmarkUnmarkSchema12(b *testing.B) {
	text := "The team did an amazing job with my budgets. Otherwise fine."
	outputs := [][]byte{
		markText([]byte(`{"text":"`+text+`","chars":60,"truncated":false,"original_chars":60,"changes":[]}`), text),
		[]byte(`{"label":"ux","confidence":0.9,"reason":"instant stand-in","model":"none (instant stand-in)","usage":{"prompt_tokens":50,"candidate_tokens":20,"total_tokens":70}}`),
		[]byte(`{"label":"ux","groups":{"app":"budget-buddy","month":"2025-11"},"rating":5}`),
	}
	for b.Loop() {
		for _, o := range outputs {
			out, err := unmark(o, text)
			if err != nil {
				b.Fatal(err)
			}
			if storedWhole(o) {
				_ = bytes.Clone(out)
			}
		}
	}
}
