package postgres

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// recordSeeds are stored records: as json.Marshal writes them, and the
// forms only json.Unmarshal reads right.
var recordSeeds = []string{
	`{"id":"r1","text":"hello"}`,
	`{"id":"r1","text":"héllo 🧑‍💻","fields":{"app":"sleep","rating":"3"},"types":{"rating":"number"},"line":12}`,
	`{"id":"r1","text":"a \"quote\" and\nnew line \u003c","fields":{"a\u0026b":"x"}}`,
	`{"id":"r1","text":"bad \xff utf8"}`,
	`{"id":"r1","text":"t","fields":{}}`,
	`{"id":"r1","text":"t","fields":null}`,
	`{"id":"r1","text":"t","line":-3}`,
	`{"id":"r1","text":"t","line":1.5}`,
	`{"id":"r1","text":"t","line":1e2}`,
	`{"id":"r1","text":"t","line":012}`,
	`{"id":"r1","text":"t","line":99999999999999999999}`,
	`{"ID":"r1","Text":"case"}`,
	`{"id":"r1","id":"r2"}`,
	`{"id":"r1","fields":{"a":"1","a":"2"}}`,
	`{"id":"r1","fields":{"b":"1"},"fields":null}`,
	`{"id":"r1","fields":{"b":"1","a":"2"},"Fields":null}`,
	`{"id":"r1","fields":{"b":"1"},"fields":{"c":"2"}}`,
	`{"id":"r1","fields":{"a":1}}`,
	`{"id":"r1","other":true}`,
	`{ "id" : "r1" }`,
	`{"id":"r1"} `,
	`{"id":"r1"}x`,
	`{"id":"r1",}`,
	`{}`,
	`{`,
	`[]`,
	``,
	`null`,
	`{"id":"tab	in"}`,
	`{"id":"r1","text":"esc \\ \/ \b \f \n \r \t \u0000 \u00e9 \u2028 \uD83D\uDE00 \ud800 end"}`,
	`{"id":"r1","text":"\uZZZZ"}`,
	`{"id":"r1","text":"\u12"}`,
	`{"id":"r1","text":"\q"}`,
	`{"\u0069d":"r1","text":"key escaped"}`,
	`{"id":"r1","fields":{"k\"ey":"v\nal"},"text":"\u003cb\u003e \u0026"}`,
	"{\"id\":\"r1\",\"text\":\"\\n\xff\"}",
}

// TestDecodeRecord_asUnmarshal holds decodeRecord and recordFieldKeys
// to json.Unmarshal: the same Record (field names), and an error exactly
// when it gives one.
func TestDecodeRecord_asUnmarshal(t *testing.T) {
	for _, raw := range recordSeeds {
		t.Run(raw, func(t *testing.T) { sameAsUnmarshal(t, []byte(raw)) })
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, raw := range recordSeeds {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { sameAsUnmarshal(t, raw) })
}

func sameAsUnmarshal(t *testing.T, raw []byte) {
	t.Helper()
	if len(raw) > 0 && (raw[0] == tagRecord || raw[0] == tagNamedRecord) {
		return // a binary record, not JSON: FuzzBinaryRecord's and FuzzNamedRecord's
	}
	var want, got pipeline.Record
	werr := json.Unmarshal(raw, &want)
	gerr := decodeRecord(raw, &got)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("decodeRecord(%q): error %v, json.Unmarshal %v", raw, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeRecord(%q) = %#v, json.Unmarshal %#v", raw, got, want)
	}
	keys := map[string]bool{}
	kerr := offline.recordFieldKeys("", raw, keys)
	wantKeys := map[string]bool{}
	for k := range want.Fields {
		wantKeys[k] = true
	}
	if (kerr == nil) != (werr == nil) || werr == nil && !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("recordFieldKeys(%q) = %v, %v; json.Unmarshal's fields %v, %v", raw, keys, kerr, wantKeys, werr)
	}
	// The names earlier records gave stay, whatever this one holds.
	if werr == nil {
		keys = map[string]bool{"a": true}
		wantKeys["a"] = true
		if err := offline.recordFieldKeys("", raw, keys); err != nil || !reflect.DeepEqual(keys, wantKeys) {
			t.Fatalf("recordFieldKeys(%q) after a record with field a = %v, %v; want %v", raw, keys, err, wantKeys)
		}
	}
}

// TestFastRecord_readsMarshalled checks that the records json.Marshal
// writes, escapes included, take the direct path.
func TestFastRecord_readsMarshalled(t *testing.T) {
	for _, r := range []pipeline.Record{
		{ID: "r1", Text: "plain text"},
		{ID: "r2", Text: "émoji 🙏🏾", Fields: map[string]string{"app": "x", "date": "2025-01-02"}, Types: map[string]pipeline.FieldType{"n": pipeline.FieldNumber}, Line: 7},
		{ID: "r3", Fields: map[string]string{}},
		{ID: "r4", Text: "a \"quote\", a \\, a new\nline, <b> & \x00 \u2028", Fields: map[string]string{"a\tb": "\"x\""}},
	} {
		raw, _ := json.Marshal(r)
		var got pipeline.Record
		if !fastRecord(raw, &got) {
			t.Errorf("%s: not read directly", raw)
		}
	}
}

// outputSeeds are stage outputs, valid or not.
var outputSeeds = []string{
	`{"label":"bug","confidence":0.83,"usage":{"a":[1,{"b":"}"}]},"model":"m"}`,
	` { "a" : 1 , "b\u00e9" : "x\"}" , "c" : [ ] , "d": -0.5e+3 } `,
	`{"a":1} trailing`,
	`{"a":tru}`,
	`{"a":01}`,
	`{"a":"\x"}`,
	`{"a":"\u12"}`,
	`{"\ud800":1}`,
	"{\"\xff\":1}",
	"{\"a\":\"\x01\"}",
	`{}`,
	`null`,
	`[1]`,
	`"text"`,
	`{"a":1,"a":2}`,
	`{"a":[[[[[[[[[[1]]]]]]]]]]}`,
	`{"a":1,}`,
	`{"a" 1}`,
}

// TestObjectKeys_asDecoder holds objectKeys to the reading report's
// export makes of an output: json.Decoder's first value decoded into a
// map; false exactly when that fails. What the strict reader accepts,
// json.Valid accepts.
func TestObjectKeys_asDecoder(t *testing.T) {
	for _, raw := range outputSeeds {
		t.Run(raw, func(t *testing.T) { keysAsDecoder(t, []byte(raw)) })
	}
}

func FuzzObjectKeys(f *testing.F) {
	for _, raw := range outputSeeds {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { keysAsDecoder(t, raw) })
}

func keysAsDecoder(t *testing.T, raw []byte) {
	t.Helper()
	got := map[string]bool{}
	ok := objectKeys(raw, got)
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	err := dec.Decode(&m)
	want := map[string]bool{}
	for k := range m {
		want[k] = true
	}
	if ok != (err == nil) || ok && !reflect.DeepEqual(got, want) {
		t.Fatalf("objectKeys(%q) = %v, %v; the decoder's %v, %v", raw, got, ok, want, err)
	}
	if strictObjectKeys(raw, map[string]bool{}) && !json.Valid(raw) {
		t.Fatalf("strictObjectKeys accepts %q, which json.Valid does not", raw)
	}
}

// BenchmarkFieldNamesScan is FieldNames's work on one item, the
// database aside: its record's field names and its three outputs' keys.
func BenchmarkFieldNamesScan(b *testing.B) {
	record := []byte(`{"id":"r000002","text":"The team did an amazing job with my budgets. Otherwise fine.","fields":{"app":"budget-buddy","date":"2025-11-03","locale":"en","rating":"5","version":"2.4.0"},"line":2}`)
	outputs := [][]byte{
		[]byte(`{"text":"The team did an amazing job with my budgets. Otherwise fine.","chars":60,"truncated":false,"original_chars":60,"changes":[]}`),
		[]byte(`{"label":"ux","confidence":0.9,"reason":"instant stand-in","model":"none (instant stand-in)","usage":{}}`),
		[]byte(`{"label":"ux","groups":{"app":"budget-buddy","month":"2025-11"},"rating":5}`),
	}
	inputs, keys := map[string]bool{}, map[string]bool{}
	for b.Loop() {
		if err := offline.recordFieldKeys("", record, inputs); err != nil {
			b.Fatal(err)
		}
		for _, o := range outputs {
			if !objectKeys(o, keys) {
				b.Fatal("not an object")
			}
		}
	}
}

// BenchmarkDecodeRecord decodes a stored record whose text json.Marshal
// escaped (a quote, a new line, a control character).
func BenchmarkDecodeRecord(b *testing.B) {
	raw, _ := json.Marshal(pipeline.Record{ID: "r000007", Text: "The \"sleep\" timer\nstops after\x00 10 minutes <b>every</b> night.",
		Fields: map[string]string{"app": "sleep-sounds", "date": "2025-12-16", "locale": "en", "rating": "3", "version": "1.12.1"}, Line: 7})
	var r pipeline.Record
	for b.Loop() {
		if err := decodeRecord(raw, &r); err != nil {
			b.Fatal(err)
		}
	}
}
