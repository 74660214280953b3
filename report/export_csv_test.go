package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"testing"
)

// csvCells are cells that take every branch of csv.Writer's quoting and
// of formulaCell: empty, `\.`, quotes, line breaks, both separators,
// leading spaces (ASCII and Unicode), formulas and plain numbers.
var csvCells = []string{"", "plain", `\.`, `\.x`, `a"b`, `""`, "line\nbreak", "cr\rhere", "a,b", "a\tb", " lead", "\u00a0nbsp",
	"\u2003em space", "\x85next line", "=SUM(A1)", "=a,\"b\"", "+1", "-3", "-0.25", "+1e-05", "@x", "\tx", "\rx", "-", "caf\u00e9", "\xff\xfe", "'"}

// TestAppendCSVField: a cell, and a formula-quoted text cell, are the
// bytes csv.Writer writes for them, CSV and TSV.
func TestAppendCSVField(t *testing.T) {
	for _, comma := range []byte{',', '\t'} {
		for _, s := range csvCells {
			for _, formulas := range []bool{false, true} {
				var want bytes.Buffer
				cw := csv.NewWriter(&want)
				cw.Comma = rune(comma)
				text := s
				if formulas {
					text = formulaCell(s)
				}
				if err := cw.Write([]string{text}); err != nil {
					t.Fatal(err)
				}
				cw.Flush()
				got := append(appendCSVText(nil, s, comma, formulas), '\n')
				if !bytes.Equal(got, want.Bytes()) {
					t.Errorf("comma %q formulas %v: %q gives %q, csv.Writer %q", comma, formulas, s, got, want.Bytes())
				}
				gotBytes := append(appendCSVText(nil, []byte(s), comma, formulas), '\n')
				if !bytes.Equal(gotBytes, want.Bytes()) {
					t.Errorf("comma %q formulas %v: %q as bytes gives %q, csv.Writer %q", comma, formulas, s, gotBytes, want.Bytes())
				}
			}
		}
	}
}

// FuzzWriteFlat_SameAsBefore holds the rows' writer (its fast paths for
// stored strings, numbers and nested values, CSV cells appended without
// csv.Writer) to the export as it was before rows streamed
// (refWriteFlat), byte for byte and error for error, for any text, input
// field and stage output.
func FuzzWriteFlat_SameAsBefore(f *testing.F) {
	f.Add("The app crashes.", "=2", `{"label":"bug","confidence":0.8300000000000001}`)
	f.Add("a\"b\nc", "-3", `{"text":"a\"b\nc \u2028 <\u003c>","n":12345678901234567890}`)
	f.Add(" lead,tab\t", "\\.", `{"nested":{"b":[1,2.50,"x,y"],"a":null},"t":true,"f":false,"s":" x"}`)
	f.Add("\xff", "", `{"e":1e3,"neg":-0,"k\u0065y":"\/","x":"\ud83d\ude00"}`)
	f.Add("", "@x", `[1]`)
	f.Fuzz(func(t *testing.T, text, field, output string) {
		src := func(fn func(FlatItem) error) error {
			return fn(FlatItem{Record: recordOf("f1", text, map[string]string{"app": field}), Status: "done",
				Outputs: map[string]json.RawMessage{"classify": json.RawMessage(output)}})
		}
		stages := []string{"classify"}
		for _, o := range []FlatOptions{{Stages: stages, Versions: map[string]string{"classify": "c1"}}, {Stages: stages, Stage: "classify"}} {
			for _, raw := range []bool{false, true} {
				for _, format := range []string{FormatJSONL, FormatCSV, FormatTSV} {
					o.Format, o.RawCells = format, raw && format != FormatJSONL
					var got, want bytes.Buffer
					errGot, errWant := WriteFlat(&got, src, o), refWriteFlat(&want, src, o)
					if (errGot == nil) != (errWant == nil) || errGot != nil && errGot.Error() != errWant.Error() {
						t.Fatalf("%s %+v: error %v, before %v", format, o, errGot, errWant)
					}
					if !bytes.Equal(got.Bytes(), want.Bytes()) {
						t.Fatalf("%s %+v: differs from before:\n%s", format, o, firstDiff(got.String(), want.String()))
					}
				}
			}
		}
	})
}
