package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// variedSource is items whose outputs differ in their field sets and
// hold every kind of value the row pass treats on its own: float noise,
// integers too large for an int64, exponents, nulls, booleans, nested
// values with unsorted keys, strings with escapes, HTML characters,
// U+2028 and invalid UTF-8, repeated keys, whitespace, escaped keys, and
// input fields named like the export's own columns.
func variedSource(fn func(FlatItem) error) error {
	out := func(s string) json.RawMessage { return json.RawMessage(s) }
	items := []FlatItem{
		{Record: recordOf("a1", "plain <b>&</b> text\u2028with \"quotes\"\n", map[string]string{"app": "TaskFlow", "status": "in-input", "id": "dup", "classify.mood": "from input"}), Status: "done",
			Outputs: map[string]json.RawMessage{
				"sanitize":  out(`{"text":"plain"}`),
				"classify":  out(`{"label":"bug","confidence":0.8300000000000001,"n":12345678901234567890,"e":1e3,"small":1.5E-7,"neg":-0,"ok":true,"no":false,"gone":null,"nested":{"z":0.30000000000000004,"a":[1,2.50,"x<y"]},"version":"v-out"}`),
				"aggregate": out(`{"label":"bug","groups":{"app":"TaskFlow"}}`)}},
		{Record: recordOf("a2", "caf\xc3\xa9 \xff broken", map[string]string{"locale": "fr", "text": "field named text"}), Status: "dead at classify", DeadReason: "permanent: blocked",
			Outputs: map[string]json.RawMessage{"sanitize": out(`{ "text" : "caf\u00e9 \/ escaped\ttab" , "k\u0065y": [1, 2] , "text":"repeated key wins"}`)}},
		{Record: recordOf("a3", "", nil), Status: "queued at sanitize"},
		{Record: recordOf("a4", "=SUM(A1:A2)", map[string]string{"app": "-3", "rating": "+1"}), Status: "done",
			Outputs: map[string]json.RawMessage{
				"sanitize": out(`null`),
				"classify": out(`{"label":"=cmd","reason":"line\nbreak","mood":"\u003cangry\u003e","confidence":1,"extra":"only here"}`),
				"extra":    out(`{"z":"a stage not in the list"}`)}},
		{Record: recordOf("a5", "trailing", map[string]string{"app": "NoteNest"}), Status: "done",
			Outputs: map[string]json.RawMessage{"classify": out(`{"label":"ux","confidence":0.5,"reason":"caf\u00e9 <b> \/ \u2028 \ud83d\ude00","mood":"raw   sep"} `), "aggregate": out(`{}`)}},
		{Record: recordOf("a6", "nested", nil), Status: "done",
			Outputs: map[string]json.RawMessage{
				"classify":  out(`{"sorted":{"app":"x","b":[1,2,{"c":null}]},"unsorted":{"b":1,"a":2},"twice":{"a":1,"a":2},"float":[1.0,0.30000000000000004],"html":{"a":"<"},"empty":{"a":[],"b":{}},"spaced":[1, 2],"nulls":[null,true,false,-1.5],"ctl":"a\u0000b\u001fc\u000ad\"e\\f\u003c","lt":"<&>"}`),
				"aggregate": out(`{"label":"bug","groups":{"app":"TaskFlow","month":"2026-01"}}`)}},
	}
	for _, it := range items {
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// TestWriteFlat_SameAsBefore holds the streaming row pass to the export
// as it was (decode each output, marshal each value again), byte for
// byte, in every format and shape.
func TestWriteFlat_SameAsBefore(t *testing.T) {
	stages := []string{"sanitize", "classify", "aggregate"}
	versions := map[string]string{"sanitize": "s1", "classify": "c<2>"}
	sources := map[string]FlatSource{"varied": variedSource, "fixture": fixtureSource(fixtureReviews()), "noisy": noisySource}
	shapes := []struct {
		name string
		opts FlatOptions
	}{
		{"all", FlatOptions{Stages: stages, Versions: versions}},
		{"all raw cells", FlatOptions{Stages: stages, Versions: versions, RawCells: true}},
		{"stage classify", FlatOptions{Stages: stages, Stage: "classify"}},
		{"stage sanitize", FlatOptions{Stages: stages, Stage: "sanitize"}},
		{"chosen columns", FlatOptions{Stages: stages, Versions: versions, Columns: []string{"classify.label", "id", "text", "id"}}},
	}
	for srcName, src := range sources {
		for _, sh := range shapes {
			for _, format := range []string{FormatJSONL, FormatCSV, FormatTSV} {
				t.Run(srcName+"/"+sh.name+"/"+format, func(t *testing.T) {
					o := sh.opts
					o.Format = format
					if len(o.Columns) > 0 && srcName != "varied" {
						o.Columns = []string{"id", "text"}
					}
					var got, want bytes.Buffer
					errGot, errWant := WriteFlat(&got, src, o), refWriteFlat(&want, src, o)
					if (errGot == nil) != (errWant == nil) || errGot != nil && errGot.Error() != errWant.Error() {
						t.Fatalf("error %v, before %v", errGot, errWant)
					}
					if !bytes.Equal(got.Bytes(), want.Bytes()) {
						t.Errorf("differs from before:\n%s", firstDiff(got.String(), want.String()))
					}
					if got.Len() == 0 {
						t.Error("wrote nothing")
					}
				})
			}
		}
	}
}

// TestWriteFlat_BadOutput: an output that is not a JSON object is an
// error naming the item and the stage, as before; it is what the
// database recorded (a RecordError, which the front end words with its
// command that checks the database), and names no command itself.
func TestWriteFlat_BadOutput(t *testing.T) {
	src := func(fn func(FlatItem) error) error {
		return fn(FlatItem{Record: recordOf("b1", "t", nil), Status: "done", Outputs: map[string]json.RawMessage{"classify": json.RawMessage(`[1,2]`)}})
	}
	for _, format := range []string{FormatJSONL, FormatCSV} {
		var b bytes.Buffer
		err := WriteFlat(&b, src, FlatOptions{Format: format, Stage: "classify"})
		var rec *RecordError
		if err == nil || !strings.Contains(err.Error(), `item "b1": the output of classify is not a JSON object`) || !errors.As(err, &rec) || strings.Contains(err.Error(), "sawtooth") {
			t.Errorf("%s: err = %v, want a RecordError naming no command", format, err)
		}
	}
}

// TestPlainJSONString: a string the row pass writes as stored is what
// encoding/json writes for its value, and the text it reads for a CSV
// cell is the value encoding/json reads.
func TestPlainJSONString(t *testing.T) {
	raws := []string{`""`, `"plain"`, `"line\nbreak"`, `"q\"b\\s"`, `"\b\f\r\t"`, `"\u0000\u001f\u007f"`, `"\u000a"`, `"\u0008"`,
		`"\u003c\u003e\u0026"`, `"\u003C"`, `"<&>"`, `"\u2028\u2029"`, "\"\u2028\"", `"\ufffd"`, `"\u00e9"`, `"café"`, `"\/"`,
		`"\ud83d\ude00"`, "\"\xff\"", `"\u0020"`, `"\u001F"`}
	for _, raw := range raws {
		var v string
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			continue
		}
		m, _ := json.Marshal(v)
		if plainJSONString([]byte(raw)) != (string(m) == raw) {
			t.Errorf("plainJSONString(%s) = %v, but marshalling its value gives %s", raw, !(string(m) == raw), m)
		}
		if unquotable([]byte(raw)) && unquotePlain([]byte(raw)) != v {
			t.Errorf("unquotePlain(%s) = %q, want %q", raw, unquotePlain([]byte(raw)), v)
		}
	}
}

// TestPlainStringEnd: inside an object, plainStringEnd finds the
// string's own end exactly when marshalling the string's value gives
// the string back, and a string cut short is never plain.
func TestPlainStringEnd(t *testing.T) {
	raws := []string{`""`, `"plain"`, `"line\nbreak"`, `"q\"b\\s"`, `"\u003c"`, `"<"`, `"a\u007fb"`, "\"\x7f\"", `"café 🙏🏾"`,
		"\"\u2028\"", "\"\xff\"", `"\u0041"`, `"ends in \\"`, `"12345678\"12345678"`, `"abcdefghijklmnopq&"`}
	for _, raw := range raws {
		obj := `{"k":` + raw + `,"z":"x"}`
		end, ok := plainStringEnd([]byte(obj), 5)
		var v string
		want := json.Unmarshal([]byte(raw), &v) == nil
		if want {
			m, _ := json.Marshal(v)
			want = string(m) == raw
		}
		if ok != want || ok && end != 5+len(raw) {
			t.Errorf("plainStringEnd(%s) = %d, %v; want %d, %v", obj, end, ok, 5+len(raw), want)
		}
		if _, ok := plainStringEnd([]byte(raw[:len(raw)-1]), 0); ok {
			t.Errorf("plainStringEnd(%s) is plain, cut short", raw[:len(raw)-1])
		}
	}
	for _, notString := range []string{``, `1`, `{"a":1}`, `x"`} {
		if _, ok := plainStringEnd([]byte(notString), 0); ok {
			t.Errorf("plainStringEnd(%q) is plain", notString)
		}
	}
}
