package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func writeInput(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// collect returns an apply func that keeps copies of every record.
func collect(into *[]pipeline.Record) func([]pipeline.Record) error {
	return func(recs []pipeline.Record) error {
		*into = append(*into, recs...)
		return nil
	}
}

// csvRows returns a CSV with a header and rows r2..rN on lines 2..n, with
// line i replaced by edits[i].
func csvRows(n int, edits map[int]string) string {
	var sb strings.Builder
	sb.WriteString("id,text,app\n")
	for i := 2; i <= n; i++ {
		if e, ok := edits[i]; ok {
			sb.WriteString(e + "\n")
			continue
		}
		fmt.Fprintf(&sb, "r%d,text of row %d,a\n", i, i)
	}
	return sb.String()
}

// TestLoad_strayQuotes: a stray quote in a 3,000-line CSV costs one line,
// not the rest of the file; two stray quotes 490 lines apart are reported
// instead of merging the rows between them into one item; a bad record
// counts all its physical lines towards the refusal.
func TestLoad_strayQuotes(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		opt      Options
		records  int
		problems []prob
		lines    int
		bad      int
		refused  bool
	}{
		{
			name:     "one unclosed quote in 3,000 lines",
			in:       csvRows(3000, map[int]string{2: `r2,"stray quote,a`}),
			records:  2998,
			problems: []prob{{2, "still open after 51 lines, over the limit on lines per field of 50"}},
			lines:    2999, bad: 1,
		},
		{
			name:    "one unclosed quote near the end",
			in:      csvRows(3000, map[int]string{2990: `r2990,"stray quote,a`}),
			records: 2998, problems: []prob{{2990, "never closed (the input ends 10 lines later)"}},
			lines: 2999, bad: 1,
		},
		{
			name:    "two stray quotes that do not close a field",
			in:      csvRows(1000, map[int]string{10: `r10,"he said "hi,a`, 500: `r500,bye",a`}),
			records: 997,
			problems: []prob{
				{10, `a quoted field is not closed properly (line 10, column 14)`},
				{500, `a " inside an unquoted field (line 500, column 9)`},
			},
			lines: 999, bad: 2,
		},
		{
			name: "two stray quotes that close a field 490 lines on",
			in:   csvRows(1000, map[int]string{10: `r10,"stray,a`, 500: `r500,text",a`}),
			// One record of 491 lines: over --max-field-lines, so line 10
			// is reported and the lines after it read on their own, where
			// line 500's quote is a bare quote.
			records: 997,
			problems: []prob{
				{10, "still open after 51 lines"},
				{500, `a " inside an unquoted field`},
			},
			lines: 999, bad: 2,
		},
		{
			name: "two stray quotes merging rows with the wrong column count",
			in:   csvRows(100, map[int]string{10: `r10,"stray,a`, 30: `r30,x",extra,a`}),
			// Lines 10-30 make one record of 4 columns: line 10 is
			// reported and the lines after it are read on their own,
			// where line 30's quote is a bare quote.
			records: 97,
			problems: []prob{
				{10, "row has 4 columns, header has 3: fix the row (a field holding ',' must be quoted) or remove it; the record spans lines 10-30: only this line is skipped"},
				{30, `a " inside an unquoted field (line 30, column 6)`},
			},
			lines: 99, bad: 2,
		},
		{
			name:    "most physical lines fail, in one record",
			in:      "id,text,app\nr1,ok,a\nr2,\"" + strings.Repeat("line\n", 10) + "\",a,extra\nr3,ok,a\n",
			refused: true,
			lines:   13, bad: 11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := tt.opt
			opt.Format = CSV
			var got []pipeline.Record
			res, err := Load(context.Background(), writeInput(t, "in.csv", tt.in), opt, 100, collect(&got))
			var re *RefusedError
			if tt.refused != errors.As(err, &re) || (!tt.refused && err != nil) {
				t.Fatalf("err = %v, refused want %v", err, tt.refused)
			}
			if res.Lines != tt.lines || res.BadLines != tt.bad {
				t.Errorf("lines %d bad %d, want %d and %d", res.Lines, res.BadLines, tt.lines, tt.bad)
			}
			if tt.refused {
				if len(got) != 0 {
					t.Errorf("a refused file applied %d records", len(got))
				}
				return
			}
			if len(got) != tt.records || res.Records != tt.records {
				t.Errorf("%d records applied (%d counted), want %d", len(got), res.Records, tt.records)
			}
			if len(res.Problems) != len(tt.problems) {
				t.Fatalf("problems:\n%s", problemList(res.Problems))
			}
			for i, p := range res.Problems {
				if p.Line != tt.problems[i].line || !strings.Contains(p.Reason, tt.problems[i].reason) {
					t.Errorf("problem %q, want line %d with %q", p, tt.problems[i].line, tt.problems[i].reason)
				}
			}
		})
	}
}

func TestCheck_errors(t *testing.T) {
	t.Run("not a regular file", func(t *testing.T) {
		_, err := Check(context.Background(), t.TempDir(), Options{Format: JSONL})
		if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("file changed between check and apply", func(t *testing.T) {
		path := writeInput(t, "in.jsonl", `{"id":"a","text":"x"}`+"\n")
		plan, err := Check(context.Background(), path, Options{Format: JSONL})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(`{"id":"b","text":"y"}`+"\n"+`{"id":"c","text":"z"}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Same size and time would hide the change from Stat: give it a
		// new time so the test does not depend on the clock's resolution.
		if err := os.Chtimes(path, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
		var got []pipeline.Record
		_, err = plan.Apply(context.Background(), 0, collect(&got))
		if err == nil || !strings.Contains(err.Error(), "changed since it was checked") || len(got) != 0 {
			t.Fatalf("err = %v, %d records applied", err, len(got))
		}
	})
	t.Run("apply error stops", func(t *testing.T) {
		path := writeInput(t, "in.jsonl", strings.Repeat(`{"id":"a","text":"x"}`+"\n", 1))
		boom := errors.New("disk full")
		_, err := Load(context.Background(), path, Options{Format: JSONL}, 0, func([]pipeline.Record) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if err := (Options{Format: CSV, RatingRange: "ten"}).Validate(); err == nil || !strings.Contains(err.Error(), "the rating range") {
			t.Fatalf("err = %v", err)
		}
	})
}

// endless is one line that never ends. It cancels its context after
// cancelAt bytes and fails the test if reading goes on past failAt.
type endless struct {
	t                *testing.T
	sent             int64
	cancelAt, failAt int64
	cancel           context.CancelFunc
}

func (e *endless) Read(p []byte) (int, error) {
	if e.sent >= e.failAt {
		e.t.Errorf("read %d bytes after the cancel: the read does not honour ctx", e.sent-e.cancelAt)
		return 0, io.EOF
	}
	if e.sent >= e.cancelAt {
		e.cancel()
	}
	for i := range p {
		p[i] = 'x'
	}
	e.sent += int64(len(p))
	return len(p), nil
}

// TestReader_cancelInsideLongLine: a Ctrl-C in the middle of one very long
// line stops the read within one read buffer.
func TestReader_cancelInsideLongLine(t *testing.T) {
	for _, format := range []Format{JSONL, CSV} {
		t.Run(string(format), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			in := &endless{t: t, cancelAt: 8 << 20, failAt: 1 << 30, cancel: cancel}
			prefix := ""
			if format == CSV {
				prefix = "id,text\n"
			}
			r, err := NewReader(&ctxReader{ctx: ctx, r: io.MultiReader(strings.NewReader(prefix), in)}, Options{Format: format})
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Next()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Next = %v, want context.Canceled", err)
			}
			if in.sent > in.cancelAt+2*readBufferSize {
				t.Errorf("read %d bytes past the cancel, want at most one buffer", in.sent-in.cancelAt)
			}
		})
	}
}

// TestReader_idSetMemory measures what the set of ids seen (for the
// duplicate check) costs per id, the one part of a Reader's memory that
// grows with the file, and holds it to the figure the package doc gives.
// Run with -v to see the figure.
func TestReader_idSetMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a million records")
	}
	const n = 1_000_000
	const maxPerID = 48 // the doc says "about 40 bytes per id"
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := NewReader(strings.NewReader(""), Options{Format: JSONL})
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 0, 32)
	for i := range n {
		id = fmt.Appendf(id[:0], "review-%09d", i)
		if first := r.firstSeen(string(id), i+1); first != 0 {
			t.Fatalf("id %s taken for a duplicate of line %d", id, first)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(r)
	perID := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("the id set holds %.1f bytes per id: %.1f MB per million ids", perID, perID*1e6/(1<<20))
	if len(r.seen) != n || perID <= 0 || perID > maxPerID {
		t.Fatalf("%d ids, %.1f bytes per id; want %d ids, at most %d bytes each", len(r.seen), perID, n, maxPerID)
	}
}

// BenchmarkLoad measures the two passes over the generated reviews: Check
// (read and decide) and Apply (read again and hand over), so the cost of
// checking before writing is visible next to the cost of reading.
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"reviews.jsonl", "reviews.csv"} {
		path := filepath.Join("..", "testdata", name)
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		format, _ := DetectFormat(path)
		opt := Options{Format: format, GroupBy: []string{"app", "month"}}
		b.Run(name+"/check", func(b *testing.B) {
			b.SetBytes(fi.Size())
			for b.Loop() {
				if _, err := Check(context.Background(), path, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/check+apply", func(b *testing.B) {
			b.SetBytes(fi.Size())
			for b.Loop() {
				if _, err := Load(context.Background(), path, opt, 0, func([]pipeline.Record) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCheck_names: an input is refused naming the options as the front
// end that set them calls them (a job file's keys, flags), in plain words
// when it says nothing.
func TestCheck_names(t *testing.T) {
	job := Names{Format: "input.format", IDField: "input.id", TextField: "input.text", MaxLineBytes: "input.max_line_bytes",
		RatingRange: "input.rating_range", Set: "set %s in the job file"}
	flags := Names{Format: "--format", IDField: "--id-field", TextField: "--text-field", Set: "pass %s"}
	tests := []struct {
		name, file, content string
		names               Names
		maxLine             int
		want                []string
	}{
		{"JSONL, no names", "in.jsonl", `{"id":"a","body":"x"}` + "\n", Names{}, 0,
			[]string{`no "text" field: set the text field if the text lives under another name`, "the input format, the id field and the text field?"}},
		{"JSONL from flags", "in.jsonl", `{"id":"a","body":"x"}` + "\n", flags, 0,
			[]string{`no "text" field: pass --text-field if the text lives under another name`, "--format, --id-field and --text-field?"}},
		{"JSONL in a job", "in.jsonl", `{"id":"a","body":"x"}` + "\n", job, 0,
			[]string{`no "text" field: set input.text in the job file if the text lives under another name`, "input.format, input.id and input.text?"}},
		{"CSV header in a job", "in.csv", "key,text\na,x\n", job, 0,
			[]string{`no "id" column for the id (set input.id in the job file to name it)`}},
		{"a long line in a job", "in.jsonl", `{"id":"a","text":"` + strings.Repeat("x", 80) + `"}` + "\n", job, 64,
			[]string{"split the record or raise input.max_line_bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeInput(t, tt.file, tt.content)
			format, _ := DetectFormat(path)
			_, err := Check(context.Background(), path, Options{Format: format, Names: tt.names, MaxLineBytes: tt.maxLine})
			var msgs []string
			var re *RefusedError
			if errors.As(err, &re) {
				for _, p := range re.Result.Problems {
					msgs = append(msgs, p.Reason)
				}
			}
			if err != nil {
				msgs = append(msgs, err.Error())
			}
			all := strings.Join(msgs, "\n")
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("messages:\n%s\nwant %q", all, w)
				}
			}
			if tt.names != flags && strings.Contains(all, "--") {
				t.Errorf("messages name a flag:\n%s", all)
			}
		})
	}
	if _, err := DetectFormatNamed("in.txt", job); err == nil || !strings.Contains(err.Error(), "set input.format in the job file") {
		t.Errorf("DetectFormatNamed: %v", err)
	}
	if err := (Options{Format: CSV, RatingRange: "ten", Names: job}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "input.rating_range: ") {
		t.Errorf("Validate: %v, want it to name input.rating_range", err)
	}
}
