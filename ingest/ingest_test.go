package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// prob is an expected problem: its line and a part of its reason.
type prob struct {
	line   int
	reason string
}

// readAll reads every record of in and returns them with the Reader and
// the error that ended the read (nil for io.EOF).
func readAll(tb testing.TB, in io.Reader, opt Options) ([]pipeline.Record, *Reader, error) {
	tb.Helper()
	r, err := NewReader(in, opt)
	if err != nil {
		tb.Fatalf("NewReader: %v", err)
	}
	var recs []pipeline.Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return recs, r, nil
		}
		if err != nil {
			return recs, r, err
		}
		recs = append(recs, rec)
	}
}

func checkProblems(tb testing.TB, r *Reader, want []prob) {
	tb.Helper()
	got := r.Problems()
	if len(got) != len(want) || r.ProblemCount() != len(want) {
		tb.Errorf("%d problems (count %d), want %d:\n%s", len(got), r.ProblemCount(), len(want), problemList(got))
		return
	}
	for i, p := range got {
		if p.Line != want[i].line || !strings.Contains(p.Reason, want[i].reason) {
			tb.Errorf("problem %d = %q, want line %d with %q", i, p.String(), want[i].line, want[i].reason)
		}
	}
}

func problemList(ps []Problem) string {
	var sb strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&sb, "\t%s\n", p)
	}
	return sb.String()
}

func ids(recs []pipeline.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func TestDetectFormat(t *testing.T) {
	tests := []struct {
		path string
		want Format
	}{
		{"in.jsonl", JSONL},
		{"dir.v2/in.NDJSON", JSONL},
		{"in.json", JSONL},
		{"/tmp/in.csv", CSV},
		{"in.Tsv", TSV},
		{"in.txt", ""},
		{"in", ""},
		{"-", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := DetectFormat(tt.path)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "the input format") {
					t.Fatalf("DetectFormat(%q) = %q, %v; want an error mentioning the input format", tt.path, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("DetectFormat(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
		})
	}
}

func TestNewReader_options(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"no format", Options{}, "the input format"},
		{"unknown format", Options{Format: "xml"}, `unknown input format "xml"`},
		{"same id and text field", Options{Format: JSONL, IDField: "x", TextField: "x"}, "must name different fields"},
		{"text field named id", Options{Format: CSV, TextField: "id"}, "must name different fields"},
		{"quote as comma", Options{Format: CSV, Comma: '"'}, "separator"},
		{"non-ASCII comma", Options{Format: CSV, Comma: '§'}, "separator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(strings.NewReader(""), tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewReader(%+v) = %v, want an error containing %q", tt.opt, err, tt.want)
			}
		})
	}
}

func TestProblem_String(t *testing.T) {
	p := Problem{Line: 12, ID: "r1", Reason: "invalid JSON (unexpected end of JSON input at byte 40): fix or remove the line"}
	want := "line 12: invalid JSON (unexpected end of JSON input at byte 40): fix or remove the line"
	if got := p.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

// withTypes is r with Types set.
func withTypes(r pipeline.Record, types map[string]pipeline.FieldType) pipeline.Record {
	r.Types = types
	return r
}

func TestReader_JSONL(t *testing.T) {
	rec := func(line int, id, text string, kv ...string) pipeline.Record {
		r := pipeline.Record{ID: id, Text: text, Line: line}
		for i := 0; i < len(kv); i += 2 {
			if r.Fields == nil {
				r.Fields = map[string]string{}
			}
			r.Fields[kv[i]] = kv[i+1]
		}
		return r
	}
	// exactly fills a line of n bytes.
	exactly := func(id string, n int) string {
		s := `{"id":"` + id + `","text":""}`
		return s[:len(s)-2] + strings.Repeat("x", n-len(s)) + `"}`
	}
	tests := []struct {
		name      string
		in        string
		opt       Options
		want      []pipeline.Record
		problems  []prob
		wantLines int // Lines(); -1 to skip the check
	}{
		{
			name: "every kind of field",
			in:   `{"id":"a","text":"hi","app":"x","rating":4,"score":4.50,"big":1e400,"ok":true,"no":false,"gone":null,"tags":["a", "b"],"meta":{"k": {"l": 1}},"empty":""}`,
			want: []pipeline.Record{withTypes(rec(1, "a", "hi", "app", "x", "rating", "4", "score", "4.50", "big", "1e400", "ok", "true", "no", "false",
				"tags", `["a","b"]`, "meta", `{"k":{"l":1}}`, "empty", ""), map[string]pipeline.FieldType{
				"rating": pipeline.FieldNumber, "score": pipeline.FieldNumber, "big": pipeline.FieldNumber, "ok": pipeline.FieldBool, "no": pipeline.FieldBool})},
			wantLines: 1,
		},
		{
			name:      "no other fields leaves Fields nil",
			in:        `{"id":"a","text":"hi"}` + "\n" + `{"text":"escaped \"quote\" and \u00e9","id":"b","x":null}`,
			want:      []pipeline.Record{rec(1, "a", "hi"), rec(2, "b", `escaped "quote" and é`)},
			wantLines: 2,
		},
		{
			name: "number ids",
			in: strings.Join([]string{
				`{"id":12,"text":"a"}`,
				`{"id":-7,"text":"b"}`,
				`{"id":30.0,"text":"c"}`,
				`{"id":1e3,"text":"d"}`,
				`{"id":123456789012345678901234567890,"text":"e"}`,
				`{"id":1.5,"text":"f"}`,
				`{"id":1e999999999,"text":"g"}`,
				`{"id":25E-1,"text":"h"}`,
				`{"id":25e-1,"text":"i"}`,
			}, "\n"),
			want: []pipeline.Record{rec(1, "12", "a"), rec(2, "-7", "b"), rec(3, "30", "c"), rec(4, "1000", "d"),
				rec(5, "123456789012345678901234567890", "e")},
			problems: []prob{
				{6, `"id" is the number 1.5, not an integer`},
				{7, "too large for an id"},
				{8, "not an integer"},
				{9, "not an integer"},
			},
			wantLines: 9,
		},
		{
			name:      "blank lines are skipped and keep line numbers",
			in:        "\n   \n" + `{"id":"a","text":"x"}` + "\n\t\r\n\n" + `{"id":"b","text":"y"}` + "\n\n",
			want:      []pipeline.Record{rec(3, "a", "x"), rec(6, "b", "y")},
			wantLines: 2,
		},
		{
			name:      "BOM, CRLF, mixed endings and no final newline",
			in:        "\ufeff" + `{"id":"a","text":"x"}` + "\r\n" + `{"id":"b","text":"y"}` + "\n" + `{"id":"c","text":"z"}` + "\r\n" + `{"id":"d","text":"w"}`,
			want:      []pipeline.Record{rec(1, "a", "x"), rec(2, "b", "y"), rec(3, "c", "z"), rec(4, "d", "w")},
			wantLines: 4,
		},
		{
			name:      "a BOM after the start is reported",
			in:        `{"id":"a","text":"x"}` + "\n\ufeff" + `{"id":"b","text":"y"}`,
			want:      []pipeline.Record{rec(1, "a", "x")},
			problems:  []prob{{2, "byte order mark"}},
			wantLines: 2,
		},
		{
			name:      "NUL bytes",
			in:        `{"id":"a","text":"x` + "\x00" + `"}` + "\n" + `{"id":"b","text":"escaped \u0000 is fine"}` + "\n\x00\x00\x00",
			want:      []pipeline.Record{rec(2, "b", "escaped \x00 is fine")},
			problems:  []prob{{1, "NUL byte (0x00) at byte 20"}, {3, "NUL byte (0x00) at byte 1"}},
			wantLines: 3,
		},
		{
			name: "id checks",
			in: strings.Join([]string{
				`{"text":"no id"}`,
				`{"id":"","text":"empty"}`,
				`{"id":" \t","text":"blank"}`,
				`{"id":"` + strings.Repeat("i", MaxIDBytes) + `","text":"longest id"}`,
				`{"id":"` + strings.Repeat("j", MaxIDBytes+1) + `","text":"too long"}`,
				`{"id":null,"text":"null"}`,
				`{"id":false,"text":"bool"}`,
				`{"id":["a"],"text":"array"}`,
				`{"id":"a` + "\xff" + `","text":"invalid UTF-8"}`,
				`{"id":"a\u0000b","text":"escaped NUL"}`,
				`{"id":"ok","text":"good"}`,
			}, "\n"),
			want: []pipeline.Record{rec(4, strings.Repeat("i", MaxIDBytes), "longest id"), rec(11, "ok", "good")},
			problems: []prob{
				{1, `no "id" field: set the id field if the id lives under another name`},
				{2, `"id" is empty or blank`},
				{3, `"id" is empty or blank`},
				{5, `"id" is 1025 bytes long, over the 1024-byte limit`},
				{6, `"id" is null`},
				{7, `"id" is a boolean: it must be a string or an integer`},
				{8, `"id" is an array`},
				{9, `"id" is not valid UTF-8`},
				{10, `"id" holds a NUL character`},
			},
			wantLines: 11,
		},
		{
			name: "text checks",
			in: strings.Join([]string{
				`{"id":"a"}`,
				`{"id":"b","text":null}`,
				`{"id":"c","text":42}`,
				`{"id":"d","text":{"en":"hi"}}`,
				`{"id":"e","text":""}`,
				`{"id":"f","text":"  "}`,
				`{"id":"g","text":"caf` + "\xe9" + `"}`,
			}, "\n"),
			want: []pipeline.Record{rec(5, "e", ""), rec(6, "f", "  "), rec(7, "g", "caf\uFFFD")},
			problems: []prob{
				{1, `no "text" field: set the text field if the text lives under another name`},
				{2, `"text" is null`},
				{3, `"text" is a number: it must be a string`},
				{4, `"text" is an object`},
			},
			wantLines: 7,
		},
		{
			name: "other id and text fields",
			in:   `{"review_id":"r1","body":"x","id":"kept as a field","text":"so is this"}` + "\n" + `{"id":"r2","body":"y"}`,
			opt:  Options{IDField: "review_id", TextField: "body"},
			want: []pipeline.Record{rec(1, "r1", "x", "id", "kept as a field", "text", "so is this")},
			problems: []prob{
				{2, `no "review_id" field: set the id field`},
			},
			wantLines: 2,
		},
		{
			name:      "invalid JSON",
			in:        `{"id":"a","text":"x"` + "\n" + `{"id":"b","text":"y"}` + "\n" + `{"id":"c" "text":"z"}`,
			want:      []pipeline.Record{rec(2, "b", "y")},
			problems:  []prob{{1, "invalid JSON (unexpected end of JSON input at byte 20): fix or remove the line"}, {3, "invalid JSON (invalid character '\"' after object key:value pair at byte 11)"}},
			wantLines: 3,
		},
		{
			name:      "not an object",
			in:        `{"id":"a","text":"x"}` + "\n" + `"a string"` + "\n42\nnull\ntrue\n" + `[{"id":"b","text":"y"}]`,
			want:      []pipeline.Record{rec(1, "a", "x")},
			problems:  []prob{{2, "not a JSON object (found a string)"}, {3, "found a number"}, {4, "found null"}, {5, "found a boolean"}, {6, "found an array"}},
			wantLines: 6,
		},
		{
			name: "a JSON array file gets a hint",
			in:   "[\n" + `  {"id":"a","text":"x"},` + "\n]\n",
			problems: []prob{
				{1, "not a JSON array: convert it with jq -c '.[]' in.json > out.jsonl"},
				{2, "invalid JSON (invalid character ',' after top-level value"},
				{3, "invalid JSON"},
			},
			wantLines: 3,
		},
		{
			name:      "a one-line JSON array gets a hint",
			in:        `[{"id":"a","text":"x"}]`,
			problems:  []prob{{1, "jq -c '.[]'"}},
			wantLines: 1,
		},
		{
			name:      "CR-only line endings get a hint",
			in:        `{"id":"a","text":"x"}` + "\r" + `{"id":"b","text":"y"}` + "\r",
			problems:  []prob{{1, `carriage return (\r) not followed by \n`}},
			wantLines: 1,
		},
		{
			name: "deep nesting is reported, not a crash",
			in: strings.Join([]string{
				strings.Repeat("[", 100_000),
				`{"id":"a","text":"x","meta":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + "}",
				`{"id":"b","text":"y","meta":` + strings.Repeat(`{"a":`, 10_001) + "1" + strings.Repeat("}", 10_001) + "}",
				`{"id":"c","text":"z","meta":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + "}",
			}, "\n"),
			want: []pipeline.Record{rec(4, "c", "z", "meta", strings.Repeat("[", 500)+strings.Repeat("]", 500))},
			problems: []prob{
				{1, "nested more than 10000 levels deep"},
				{2, "nested more than 10000 levels deep"},
				{3, "nested more than 10000 levels deep"},
			},
			wantLines: 4,
		},
		{
			name: "duplicate ids: first wins",
			in: strings.Join([]string{
				`{"id":"d1","text":"first"}`,
				`{"id":"d2","text":"second"}`,
				`{"id":"d1","text":"again"}`,
				`{"id":7,"text":"number"}`,
				`{"id":"7","text":"string"}`,
				`{"id":"d1","text":"and again"}`,
			}, "\n"),
			want: []pipeline.Record{rec(1, "d1", "first"), rec(2, "d2", "second"), rec(4, "7", "number")},
			problems: []prob{
				{3, `duplicate id "d1" (first seen on line 1): skipped`},
				{5, `duplicate id "7" (first seen on line 4): skipped`},
				{6, `duplicate id "d1" (first seen on line 1): skipped`},
			},
			wantLines: 6,
		},
		{
			name: "a bad line does not claim its id",
			in:   `{"id":"a"}` + "\n" + `{"id":"a","text":"x"}`,
			want: []pipeline.Record{rec(2, "a", "x")},
			problems: []prob{
				{1, `no "text" field`},
			},
			wantLines: 2,
		},
		{
			name: "lines over MaxLineBytes are skipped",
			in: strings.Join([]string{
				exactly("a", 64),
				exactly("b", 65),
				exactly("c", 64) + "\r",
				strings.Repeat("z", 10_000),
				`{"id":"d"`,
			}, "\n"),
			opt: Options{MaxLineBytes: 64},
			want: []pipeline.Record{
				rec(1, "a", strings.Repeat("x", 64-len(`{"id":"a","text":""}`))),
				rec(3, "c", strings.Repeat("x", 64-len(`{"id":"c","text":""}`))),
			},
			problems: []prob{
				{2, "line is 65 bytes, over the 64-byte limit: skipped without reading it into memory; split the record or raise the line limit"},
				{4, "line is 10000 bytes, over the 64-byte limit"},
				{5, "invalid JSON"},
			},
			wantLines: 5,
		},
		{
			name:      "Comma is ignored",
			in:        `{"id":"a","text":"x"}`,
			opt:       Options{Comma: '§'},
			want:      []pipeline.Record{rec(1, "a", "x")},
			wantLines: 1,
		},
		{
			name:      "empty input",
			in:        "",
			wantLines: 0,
		},
		{
			name:      "only a BOM",
			in:        "\ufeff",
			wantLines: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := tt.opt
			opt.Format = JSONL
			got, r, err := readAll(t, strings.NewReader(tt.in), opt)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("records:\n got %+v\nwant %+v", got, tt.want)
			}
			checkProblems(t, r, tt.problems)
			if tt.wantLines >= 0 && r.Lines() != tt.wantLines {
				t.Errorf("Lines() = %d, want %d", r.Lines(), tt.wantLines)
			}
		})
	}
}

func TestReader_CSV(t *testing.T) {
	rec := func(line int, id, text string, kv ...string) pipeline.Record {
		r := pipeline.Record{ID: id, Text: text, Line: line}
		for i := 0; i < len(kv); i += 2 {
			if r.Fields == nil {
				r.Fields = map[string]string{}
			}
			r.Fields[kv[i]] = kv[i+1]
		}
		return r
	}
	tests := []struct {
		name      string
		in        string
		opt       Options
		want      []pipeline.Record
		problems  []prob
		warnings  []string
		wantLines int
	}{
		{
			name:      "fields, with empty cells left out",
			in:        "id,text,app,rating\nr1,Great app,photo-editor,5\nr2,,,3\n",
			want:      []pipeline.Record{rec(2, "r1", "Great app", "app", "photo-editor", "rating", "5"), rec(3, "r2", "", "rating", "3")},
			wantLines: 2,
		},
		{
			name:      "TSV",
			in:        "id\ttext\tapp\nr1\tcomma, inside\tx\n",
			opt:       Options{Format: TSV},
			want:      []pipeline.Record{rec(2, "r1", "comma, inside", "app", "x")},
			wantLines: 1,
		},
		{
			name:      "semicolons",
			in:        "text;id\n\"a;b\";r1\n",
			opt:       Options{Comma: ';'},
			want:      []pipeline.Record{rec(2, "r1", "a;b")},
			wantLines: 1,
		},
		{
			name:      "header names are trimmed, unnamed columns dropped",
			in:        ", id , text ,\n0,r1,x,y\n",
			want:      []pipeline.Record{rec(2, "r1", "x")},
			wantLines: 1,
		},
		{
			name:      "other id and text columns",
			in:        "review_id,body,id\nr1,x,other\n",
			opt:       Options{IDField: "review_id", TextField: "body"},
			want:      []pipeline.Record{rec(2, "r1", "x", "id", "other")},
			wantLines: 1,
		},
		{
			name: "wrong column counts",
			in:   "id,text,app\nr1,x,a\nr2,x\nr3,x,a,b\nr4,y,a\n",
			want: []pipeline.Record{rec(2, "r1", "x", "app", "a"), rec(5, "r4", "y", "app", "a")},
			problems: []prob{
				{3, `row has 2 columns, header has 3: fix the row (a field holding ',' must be quoted) or remove it`},
				{4, "row has 4 columns, header has 3"},
			},
			wantLines: 4,
		},
		{
			name:      "multi-line quoted fields keep their starting line",
			in:        "id,text\nr1,\"one\ntwo\n\nthree\"\nr2,after\n",
			want:      []pipeline.Record{rec(2, "r1", "one\ntwo\n\nthree"), rec(6, "r2", "after")},
			wantLines: 5,
		},
		{
			name:      "BOM and CRLF",
			in:        "\ufeffid,text\r\nr1,\"a\r\nb\"\r\n\r\nr2,c\r\n",
			want:      []pipeline.Record{rec(2, "r1", "a\nb"), rec(5, "r2", "c")},
			wantLines: 3,
		},
		{
			name: "quote errors are reported and reading goes on",
			in:   "id,text\nr1,bare \"quote\"\nr2,\"bad\"quote\nr3,\"good \"\"quoted\"\"\"\nr4,fine\n",
			want: []pipeline.Record{rec(4, "r3", `good "quoted"`), rec(5, "r4", "fine")},
			problems: []prob{
				{2, `invalid CSV: a " inside an unquoted field (line 2, column 9)`},
				{3, `invalid CSV: a quoted field is not closed properly (line 3, column 8)`},
			},
			wantLines: 4,
		},
		{
			name:      "a quote left open to the end costs its line only",
			in:        "id,text\nr1,ok\nr2,\"never closed\nr3,not swallowed\n",
			want:      []pipeline.Record{rec(2, "r1", "ok"), rec(4, "r3", "not swallowed")},
			problems:  []prob{{3, "a quoted field opened on this line is never closed (the input ends 1 line later): probably a missing closing quote"}},
			wantLines: 3,
		},
		{
			name: "id checks, NUL bytes and duplicates",
			in:   "id,text,app\n,x,a\n  ,x,a\nr1,x\x00y,a\nr2,x,a\x00\nr3,x,a\nr3,y,a\n" + strings.Repeat("i", MaxIDBytes+1) + ",x,a\n",
			want: []pipeline.Record{rec(6, "r3", "x", "app", "a")},
			problems: []prob{
				{2, `"id" is empty or blank`},
				{3, `"id" is empty or blank`},
				{4, `NUL byte (0x00) in column "text"`},
				{5, `NUL byte (0x00) in column "app"`},
				{7, `duplicate id "r3" (first seen on line 6): skipped`},
				{8, `"id" is 1025 bytes long`},
			},
			wantLines: 7,
		},
		{
			name: "lines over MaxLineBytes are skipped",
			in:   "id,text\nr1,short\nr2," + strings.Repeat("x", 100) + "\nr3,short\n",
			opt:  Options{MaxLineBytes: 64},
			want: []pipeline.Record{rec(2, "r1", "short"), rec(4, "r3", "short")},
			problems: []prob{
				{3, "line is 103 bytes, over the 64-byte limit"},
			},
			wantLines: 3,
		},
		{
			name:      "a quoted field may span lines up to MaxLineBytes",
			in:        "id,text\nr1,\"" + strings.Repeat("x\n", 30) + "\"\nr2,y\n",
			opt:       Options{MaxLineBytes: 64},
			want:      []pipeline.Record{rec(2, "r1", strings.Repeat("x\n", 30)), rec(33, "r2", "y")},
			warnings:  []string{"1 records span more than 10 lines (lines 2-32): if a field was not meant to run on that long, two stray quotes may have merged the rows between them"},
			wantLines: 32,
		},
		{
			name:      "a quote open past MaxLineBytes costs its line only",
			in:        "id,text\nr1,ok\nr2,\"opens here\n" + "r3,more text\nr4,more text\nr5,more text\nr6,more text\nr7,more text\n",
			opt:       Options{MaxLineBytes: 64},
			want:      []pipeline.Record{rec(2, "r1", "ok"), rec(4, "r3", "more text"), rec(5, "r4", "more text"), rec(6, "r5", "more text"), rec(7, "r6", "more text"), rec(8, "r7", "more text")},
			problems:  []prob{{3, `a quoted field opened on this line is still open after 67 bytes, over the 64-byte limit: probably a missing closing quote ("); the line is skipped and the lines after it are read on their own`}},
			wantLines: 7,
		},
		{
			name:      "a quote open past MaxFieldLines costs its line only",
			in:        "id,text\nr1,\"open\nr2,a\nr3,b\nr4,c\n",
			opt:       Options{MaxFieldLines: 2},
			want:      []pipeline.Record{rec(3, "r2", "a"), rec(4, "r3", "b"), rec(5, "r4", "c")},
			problems:  []prob{{2, "still open after 3 lines, over the limit on lines per field of 2"}},
			wantLines: 4,
		},
		{
			name: "a stray quote inside a replayed line is caught again",
			in:   "id,text\nr1,\"open\nr2,a\nr3,\"again\nr4,c\nr5,d\n",
			opt:  Options{MaxFieldLines: 2},
			want: []pipeline.Record{rec(3, "r2", "a"), rec(5, "r4", "c"), rec(6, "r5", "d")},
			problems: []prob{
				{2, "a quoted field is not closed properly (line 4, column 4): double each \" inside it and end it with a single \"; the record spans lines 2-4: only this line is skipped and the lines after it are read on their own"},
				{4, "still open after 3 lines"},
			},
			wantLines: 5,
		},
		{
			name:      "empty input",
			in:        "",
			wantLines: 0,
		},
		{
			name:      "header only",
			in:        "id,text\n",
			wantLines: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := tt.opt
			if opt.Format == "" {
				opt.Format = CSV
			}
			got, r, err := readAll(t, strings.NewReader(tt.in), opt)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("records:\n got %+v\nwant %+v", got, tt.want)
			}
			checkProblems(t, r, tt.problems)
			checkWarnings(t, r.Warnings(), tt.warnings)
			if r.Lines() != tt.wantLines {
				t.Errorf("Lines() = %d, want %d", r.Lines(), tt.wantLines)
			}
		})
	}
}

// TestReader_errors covers inputs that stop the Reader: Next returns an
// error other than io.EOF, and the same error again on the next call.
func TestReader_errors(t *testing.T) {
	failing := func(good string, err error) io.Reader {
		return io.MultiReader(strings.NewReader(good), &errReader{err})
	}
	errDisk := errors.New("disk on fire")
	tests := []struct {
		name    string
		in      io.Reader
		opt     Options
		wantIDs []string
		want    []string // parts of the error
		is      error
	}{
		{
			name: "CSV header without the id column",
			in:   strings.NewReader("review,text,app\nr1,x,y\n"),
			opt:  Options{Format: CSV},
			want: []string{`no "id" column for the id (set the id field to name it)`, `its columns are "review", "text", "app"`},
		},
		{
			name: "CSV header without either column",
			in:   strings.NewReader("a,b\n1,2\n"),
			opt:  Options{Format: CSV, IDField: "key", TextField: "body"},
			want: []string{`no "key" column`, "the id field", `no "body" column`, "the text field", `"a", "b"`},
		},
		{
			name: "CSV header naming a column twice",
			in:   strings.NewReader("id,text,app,app\n"),
			opt:  Options{Format: CSV},
			want: []string{`names column "app" twice (columns 3 and 4): rename one`},
		},
		{
			name: "CSV header that does not parse",
			in:   strings.NewReader("id,\"text\n"),
			opt:  Options{Format: CSV},
			want: []string{"line 1: cannot read the CSV header"},
		},
		{
			name: "CSV header over MaxLineBytes",
			in:   strings.NewReader("id,text," + strings.Repeat("c", 100) + "\nr1,x,y\n"),
			opt:  Options{Format: CSV, MaxLineBytes: 64},
			want: []string{"line 1: line is 108 bytes, over the 64-byte limit", "the first line must be the CSV header"},
		},
		{
			name:    "JSONL read error",
			in:      failing(`{"id":"a","text":"x"}`+"\n"+`{"id":"b",`, errDisk),
			opt:     Options{Format: JSONL},
			wantIDs: []string{"a"},
			want:    []string{"read input after line 1: disk on fire"},
			is:      errDisk,
		},
		{
			name:    "CSV read error",
			in:      failing("id,text\nr1,x\nr2,", errDisk),
			opt:     Options{Format: CSV},
			wantIDs: []string{"r1"},
			want:    []string{"disk on fire"},
			is:      errDisk,
		},
		{
			name: "UTF-16 JSONL",
			in:   strings.NewReader("\xff\xfe{\x00\"\x00"),
			opt:  Options{Format: JSONL},
			want: []string{"input is UTF-16 (it starts with the byte order mark ff fe): convert it to UTF-8"},
		},
		{
			name: "UTF-16 CSV",
			in:   strings.NewReader("\xfe\xff\x00i\x00d"),
			opt:  Options{Format: CSV},
			want: []string{"input is UTF-16"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, r, err := readAll(t, tt.in, tt.opt)
			if err == nil {
				t.Fatalf("read to the end without an error; records %v, problems:\n%s", ids(recs), problemList(r.Problems()))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q does not wrap %q", err, tt.is)
			}
			if got := ids(recs); !slices.Equal(got, append([]string{}, tt.wantIDs...)) {
				t.Errorf("ids %v, want %v", got, tt.wantIDs)
			}
			if _, again := r.Next(); again != err {
				t.Errorf("Next after the error = %v, want the same error", again)
			}
		})
	}
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

func TestReader_problemCap(t *testing.T) {
	var in strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&in, "{\"id\":\"%d\"}\n", 1500-i)
	}
	in.WriteString(`{"id":"ok","text":"x"}`)
	recs, r, err := readAll(t, strings.NewReader(in.String()), Options{Format: JSONL})
	if err != nil || len(recs) != 1 {
		t.Fatalf("got %d records, %v; want 1", len(recs), err)
	}
	ps := r.Problems()
	if len(ps) != MaxProblems || r.ProblemCount() != 1500 {
		t.Fatalf("%d problems kept, %d counted; want %d and 1500", len(ps), r.ProblemCount(), MaxProblems)
	}
	if ps[0].Line != 1 || ps[MaxProblems-1].Line != MaxProblems || ps[0].ID != "1500" {
		t.Fatalf("kept problems run from %+v to %+v, want the first %d", ps[0], ps[MaxProblems-1], MaxProblems)
	}
}

// filler produces n bytes of 'x' without holding them, and samples the
// heap as it goes.
type filler struct {
	n, sent  int64
	nextPeek int64
	peak     uint64
}

func (f *filler) Read(p []byte) (int, error) {
	if f.sent >= f.n {
		return 0, io.EOF
	}
	if f.sent >= f.nextPeek {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		f.peak = max(f.peak, ms.HeapInuse)
		f.nextPeek += 1 << 20
	}
	p = p[:min(int64(len(p)), f.n-f.sent)]
	for i := range p {
		p[i] = 'x'
	}
	f.sent += int64(len(p))
	return len(p), nil
}

// TestReader_longLineMemory feeds a 50 MB line with no newline, made on
// the fly, and checks that it is skipped and reported, that the line after
// it comes through, and that the heap never holds the line: the heap's
// growth while reading stays under a third of the line, and so does all
// the memory allocated (a reader that buffers the line once, or grows a
// buffer chunk by chunk, allocates at least the line's size).
func TestReader_longLineMemory(t *testing.T) {
	const size = 50 << 20
	const heapLimit = size / 3
	const allocLimit = size / 3
	tests := []struct {
		format         Format
		before, after  string
		wantIDs        []string
		wantLine, size int
	}{
		{JSONL, `{"id":"a","text":"before"}` + "\n", "\n" + `{"id":"b","text":"after"}` + "\n", []string{"a", "b"}, 2, size},
		{CSV, "id,text\na,before\n", "\nb,after\n", []string{"a", "b"}, 3, size},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			f := &filler{n: size}
			in := io.MultiReader(strings.NewReader(tt.before), f, strings.NewReader(tt.after))
			recs, r, err := readAll(t, in, Options{Format: tt.format})
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(recs); !slices.Equal(got, tt.wantIDs) {
				t.Errorf("ids %v, want %v", got, tt.wantIDs)
			}
			checkProblems(t, r, []prob{{tt.wantLine, fmt.Sprintf("line is %d bytes, over the %d-byte limit", tt.size, DefaultMaxLineBytes)}})
			if f.sent != size {
				t.Fatalf("read %d filler bytes, want %d", f.sent, size)
			}
			grew := int64(f.peak) - int64(before.HeapInuse)
			if f.peak == 0 || grew > heapLimit {
				t.Errorf("heap in use grew by %d MB while reading a %d MB line, want under %d MB", grew>>20, size>>20, heapLimit>>20)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			if allocated > allocLimit {
				t.Errorf("allocated %d MB reading a %d MB line (%.2f bytes per byte), want under %d MB", allocated>>20, size>>20, float64(allocated)/size, allocLimit>>20)
			}
			t.Logf("heap grew by %.1f MB; %.1f MB allocated, %.3f bytes per input byte", float64(grew)/(1<<20), float64(allocated)/(1<<20), float64(allocated)/size)
		})
	}
}

// TestReader_badFiles reads every file in testdata/bad and checks the exact
// lines reported and the ids that come through.
func TestReader_badFiles(t *testing.T) {
	dir := filepath.Join("..", "testdata", "bad")
	longLine := filepath.Join(t.TempDir(), "long-line.jsonl")
	if err := os.WriteFile(longLine, []byte(`{"id":"l1","text":"before"}`+"\n"+
		`{"id":"l2","text":"`+strings.Repeat("long ", 2<<20)+`"}`+"\n"+
		`{"id":"l3","text":"after"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type badFile struct {
		file     string // in testdata/bad, or an absolute path
		wantIDs  []string
		problems []prob
		lines    int // physical data lines, when not one per id and problem
		check    func(t *testing.T, recs []pipeline.Record)
	}
	tests := []badFile{
		{
			file:    "malformed.jsonl",
			wantIDs: []string{"m1", "m3", "m8"},
			problems: []prob{
				{2, "invalid JSON (unexpected end of JSON input at byte 33)"},
				{4, "invalid JSON (invalid character '\"' after object key:value pair at byte 12)"},
				{5, "invalid JSON (invalid character 'o' in literal null (expecting 'u') at byte 2)"},
				{6, "invalid JSON (invalid character 'x' after top-level value at byte 39)"},
				{7, "not a JSON object (found an array)"},
				{9, "not a JSON object (found a string)"},
				{10, "invalid JSON (unexpected end of JSON input"},
			},
		},
		{
			file:    "missing-id.jsonl",
			wantIDs: []string{"a1", "12", "a11"},
			problems: []prob{
				{2, `no "id" field`},
				{3, `"id" is empty or blank`},
				{4, `"id" is null`},
				{5, `"id" is a boolean`},
				{7, `"id" is empty or blank`},
				{8, `"id" is 1025 bytes long`},
				{9, `"id" is the number 1.5, not an integer`},
				{10, `no "id" field: set the id field`},
				{12, `"id" is an object`},
			},
		},
		{
			file:    "empty-text.jsonl",
			wantIDs: []string{"e1", "e2", "e6"},
			problems: []prob{
				{3, `no "text" field: set the text field if the text lives under another name`},
				{4, `"text" is null`},
				{5, `"text" is a number`},
				{7, `no "text" field`},
			},
		},
		{
			file:    "invalid-utf8.jsonl",
			wantIDs: []string{"u1", "u2", "u4", "u5"},
			problems: []prob{
				{3, `"id" is not valid UTF-8`},
				{6, "invalid JSON (invalid character 'ÿ' looking for beginning of object key string at byte 12)"},
			},
			check: func(t *testing.T, recs []pipeline.Record) {
				if recs[1].Text != "caf\uFFFD in Latin-1" || recs[2].Text != "cut \uFFFD\uFFFD sequence" {
					t.Errorf("texts %q and %q: want invalid bytes read as U+FFFD", recs[1].Text, recs[2].Text)
				}
			},
		},
		{
			file:    "duplicate-ids.jsonl",
			wantIDs: []string{"d1", "d2", "5", "d3", "D1"},
			problems: []prob{
				{3, `duplicate id "d1" (first seen on line 1): skipped`},
				{5, `duplicate id "5" (first seen on line 4): skipped`},
				{7, `duplicate id "d2" (first seen on line 2): skipped`},
			},
		},
		{
			file:     "bom-crlf.jsonl",
			wantIDs:  []string{"b1", "b2", "b3", "b5", "b6"},
			problems: []prob{{5, "byte order mark"}},
			check: func(t *testing.T, recs []pipeline.Record) {
				want := []int{1, 3, 4, 6, 7}
				for i, r := range recs {
					if r.Line != want[i] {
						t.Errorf("%s on line %d, want %d", r.ID, r.Line, want[i])
					}
				}
				if recs[3].Text != "escaped\r\nline break" {
					t.Errorf("b5 text %q", recs[3].Text)
				}
			},
		},
		{
			file:     "nul-bytes.jsonl",
			wantIDs:  []string{"n1", "n3", "n5"},
			problems: []prob{{2, "NUL byte (0x00) at byte 24"}, {4, "NUL byte (0x00) at byte 1"}},
		},
		{
			file:    "nested.jsonl",
			wantIDs: []string{"x1", "x3", "x5"},
			problems: []prob{
				{2, "invalid JSON (nested more than 10000 levels deep at byte 10045)"},
				{4, "nested more than 10000 levels deep"},
			},
			check: func(t *testing.T, recs []pipeline.Record) {
				if got := recs[0].Fields["meta"]; got != `{"a":[1,2,{"b":null}]}` {
					t.Errorf("x1 meta %q", got)
				}
			},
		},
		{
			file:    "wrong-columns.csv",
			wantIDs: []string{"c1", "c5", "c8", "c10"},
			problems: []prob{
				{3, "row has 3 columns, header has 6"},
				{4, "row has 7 columns, header has 6"},
				{5, "row has 7 columns, header has 6"},
				{8, `a " inside an unquoted field (line 8, column 9)`},
				{9, `"id" is empty or blank`},
				{11, `a quoted field is not closed properly (line 11, column 9)`},
			},
			lines: 11, // c5 spans two
			check: func(t *testing.T, recs []pipeline.Record) {
				want := pipeline.Record{ID: "c5", Text: "Multi\nline text", Line: 6,
					Fields: map[string]string{"app": "fitness-pal", "rating": "3", "date": "2025-03-03", "locale": "en"}}
				if !reflect.DeepEqual(recs[1], want) {
					t.Errorf("c5 = %+v, want %+v", recs[1], want)
				}
				if recs[2].Text != `Good "quoted" row` || recs[3].Line != 12 {
					t.Errorf("c8 = %+v, c10 = %+v", recs[2], recs[3])
				}
			},
		},
		{
			file:     longLine,
			wantIDs:  []string{"l1", "l3"},
			problems: []prob{{2, fmt.Sprintf("line is %d bytes, over the %d-byte limit", 10<<20+len(`{"id":"l2","text":""}`), DefaultMaxLineBytes)}},
		},
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "README.md" && !slices.ContainsFunc(tests, func(tt badFile) bool { return tt.file == e.Name() }) {
			t.Errorf("testdata/bad/%s has no case in TestReader_badFiles", e.Name())
		}
	}

	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			path := tt.file
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			format, err := DetectFormat(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			recs, r, err := readAll(t, f, Options{Format: format})
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if got := ids(recs); !slices.Equal(got, tt.wantIDs) {
				t.Errorf("ids %v, want %v", got, tt.wantIDs)
			}
			checkProblems(t, r, tt.problems)
			wantLines := len(tt.wantIDs) + len(tt.problems)
			if tt.lines != 0 {
				wantLines = tt.lines
			}
			if r.Lines() != wantLines {
				t.Errorf("Lines() = %d, want %d", r.Lines(), wantLines)
			}
			if tt.check != nil && !t.Failed() {
				tt.check(t, recs)
			}
		})
	}
}

// TestReader_reviews reads the generated reviews: every one comes through,
// and the CSV and JSONL forms of the same reviews agree.
func TestReader_reviews(t *testing.T) {
	read := func(name string) []pipeline.Record {
		t.Helper()
		f, err := os.Open(filepath.Join("..", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		format, err := DetectFormat(name)
		if err != nil {
			t.Fatal(err)
		}
		recs, r, err := readAll(t, f, Options{Format: format})
		if err != nil {
			t.Fatal(err)
		}
		if r.ProblemCount() != 0 {
			t.Fatalf("%s: %d problems:\n%s", name, r.ProblemCount(), problemList(r.Problems()))
		}
		return recs
	}
	if got := read("reviews.jsonl"); len(got) != 3000 {
		t.Fatalf("reviews.jsonl: %d records, want 3000", len(got))
	}
	jsonl, csv := read("reviews-small.jsonl"), read("reviews.csv")
	if len(jsonl) != 200 || len(csv) != 200 {
		t.Fatalf("%d JSONL and %d CSV records, want 200 each", len(jsonl), len(csv))
	}
	for i, j := range jsonl {
		c := csv[i]
		// CSV cannot carry NUL and reads "\r\n" in a field as "\n".
		wantText := strings.ReplaceAll(strings.ReplaceAll(j.Text, "\x00", ""), "\r\n", "\n")
		if c.ID != j.ID || c.Text != wantText {
			t.Errorf("record %d: CSV %q %q, JSONL %q %q", i, c.ID, c.Text, j.ID, wantText)
		}
		for _, k := range []string{"app", "rating", "date", "locale"} {
			if c.Fields[k] != j.Fields[k] {
				t.Errorf("%s: CSV %s %q, JSONL %q", j.ID, k, c.Fields[k], j.Fields[k])
			}
		}
	}
}

func FuzzReader(f *testing.F) {
	seeds := []struct {
		in  string
		csv bool
		max uint16
	}{
		{`{"id":"a","text":"x","n":1}` + "\n" + `{"id":2,"text":""}`, false, 0},
		{"\ufeff" + `{"id":"a","text":"x"}` + "\r\n\r\n" + `{"id":"a","text":"dup"}`, false, 0},
		{`{"id":1e3,"text":"x"}` + "\n" + `{"id":-0.0,"text":"y"}`, false, 0},
		{strings.Repeat("[", 10_005), false, 0},
		{`{"id":"a","text":"` + strings.Repeat("x", 100) + `"}`, false, 32},
		{"id,text,app\nr1,x,a\nr2,\"multi\nline\",b\nr3,bare\"quote,c\n", true, 0},
		{"id,text\nr1,\"open\n" + strings.Repeat("x\n", 40), true, 32},
		{"\xff\xfeid", true, 0},
		{"id,text\n,\n\x00,x\n", true, 0},
	}
	for _, s := range seeds {
		f.Add([]byte(s.in), s.csv, s.max)
	}
	for _, name := range []string{"malformed.jsonl", "invalid-utf8.jsonl", "bom-crlf.jsonl", "nul-bytes.jsonl", "wrong-columns.csv"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "bad", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.HasSuffix(name, ".csv"), uint16(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, isCSV bool, maxLine uint16) {
		opt := Options{Format: JSONL, MaxLineBytes: int(maxLine)}
		if isCSV {
			opt.Format = CSV
		}
		r, err := NewReader(bytes.NewReader(in), opt)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		last := 0
		for n := 0; ; n++ {
			rec, err := r.Next()
			if err != nil {
				break
			}
			switch {
			case rec.ID == "":
				t.Fatalf("record %d has an empty id: %+v", n, rec)
			case len(rec.ID) > MaxIDBytes:
				t.Fatalf("record %d has a %d-byte id", n, len(rec.ID))
			case seen[rec.ID]:
				t.Fatalf("id %q returned twice", rec.ID)
			case rec.Line <= last:
				t.Fatalf("record %d on line %d after line %d", n, rec.Line, last)
			case n > len(in):
				t.Fatalf("%d records from %d bytes", n, len(in))
			}
			seen[rec.ID] = true
			last = rec.Line
		}
		if len(r.Problems()) > r.ProblemCount() || len(r.Problems()) > MaxProblems {
			t.Fatalf("%d problems kept, %d counted", len(r.Problems()), r.ProblemCount())
		}
		for _, p := range r.Problems() {
			if p.Line < 1 || p.Reason == "" {
				t.Fatalf("bad problem %+v", p)
			}
		}
	})
}
