package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// sanitizeOut is the sanitize stage's output shape for text, cleaned to
// clean, written with or without HTML escaping.
func sanitizeOut(t testing.TB, text, clean string, escapeHTML bool) []byte {
	t.Helper()
	changes := []string{}
	if clean != text {
		changes = append(changes, "whitespace")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(struct {
		Text          string   `json:"text"`
		Chars         int      `json:"chars"`
		Truncated     bool     `json:"truncated"`
		OriginalChars int      `json:"original_chars"`
		Changes       []string `json:"changes"`
	}{clean, utf8.RuneCountInString(clean), false, utf8.RuneCountInString(text), changes}); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func TestMarkText(t *testing.T) {
	long := strings.Repeat("a clean review ", 8)
	for _, tc := range []struct {
		name   string
		text   string
		out    []byte
		marked bool
	}{
		{"clean text", long, sanitizeOut(t, long, long, true), true},
		{"html escaped", "<b>" + long + "&</b>", sanitizeOut(t, "<b>"+long+"&</b>", "<b>"+long+"&</b>", true), true},
		{"html kept", "<b>" + long + "&</b>", sanitizeOut(t, "<b>"+long+"&</b>", "<b>"+long+"&</b>", false), true},
		{"quotes, new lines, U+2028", "\"" + long + "\"\n\u2028🙏🏾", sanitizeOut(t, "\""+long+"\"\n\u2028🙏🏾", "\""+long+"\"\n\u2028🙏🏾", true), true},
		{"invalid UTF-8 as Marshal replaced it", long + "\xff", sanitizeOut(t, long+"\xff", long+"\xff", true), true},
		{"changed text", "  " + long, sanitizeOut(t, "  "+long, strings.TrimSpace(long), true), false},
		{"one character saves a byte", "a", []byte(`{"text":"a"}`), true},
		{"empty text", "", []byte(`{"text":""}`), false},
		{"no text at all", long, []byte(`{"label":"bug"}`), false},
		{"empty output", long, []byte{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := markText(tc.out, tc.text)
			if isMarked(m) != tc.marked {
				t.Fatalf("markText(%s) = %q, marked %v; want %v", tc.out, m, isMarked(m), tc.marked)
			}
			if tc.marked && (len(m) >= len(tc.out) || len(tc.text) > 10 && len(m) > len(tc.out)-len(tc.text)) {
				t.Errorf("marked output of %d bytes for %d with a text of %d", len(m), len(tc.out), len(tc.text))
			}
			got, err := unmark(m, tc.text)
			if err != nil || !bytes.Equal(got, tc.out) {
				t.Errorf("unmark(markText(out)) = %q, %v; want %q", got, err, tc.out)
			}
			if !tc.marked {
				return
			}
			shape, err := outputShape(m)
			var keys map[string]any
			if err != nil || json.Unmarshal(shape, &keys) != nil || keys["text"] != "" {
				t.Errorf("outputShape = %s, %v; want the output with an empty text", shape, err)
			}
		})
	}
	if _, err := unmark([]byte{markEscaped, 200}, "x"); err == nil {
		t.Error("unmark of an offset past the end: no error")
	}
}

// setOutput stores data as item id's output of stage si (nil: none) in
// its row of outputs, as damage would: no handle's rules apply.
func setOutput(t testing.TB, url, id string, si int, data []byte) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var row []byte
	if err := conn.QueryRow(ctx, `SELECT data FROM `+DefaultSchema+`.output WHERE item_id = $1`, id).Scan(&row); err != nil {
		t.Fatal(err)
	}
	entries, err := outputEntries(row)
	if err != nil {
		t.Fatal(err)
	}
	entries = slices.DeleteFunc(entries, func(e outputEntry) bool { return e.stage == si })
	if data != nil {
		entries = append(entries, outputEntry{si, data})
		slices.SortFunc(entries, func(a, b outputEntry) int { return a.stage - b.stage })
	}
	if _, err := conn.Exec(ctx, `UPDATE `+DefaultSchema+`.output SET data = $2 WHERE item_id = $1`, id, encodeOutputRow(entries)); err != nil {
		t.Fatal(err)
	}
}

// rawOutputs is what the output table holds at stage si, by item, in
// either layout: a row per item (outrow.go) or, set back to an older
// schema, per item and stage.

func rawOutputs(t testing.TB, url string, si int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var byStage bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = '`+DefaultSchema+`.output'::regclass AND attname = 'stage' AND NOT attisdropped)`).Scan(&byStage); err != nil {
		t.Fatal(err)
	}
	query, args := `SELECT item_id, data FROM `+DefaultSchema+`.output`, []any(nil)
	if byStage {
		query, args = query+` WHERE stage = $1`, []any{si}
	}
	rows, _ := conn.Query(ctx, query, args...)
	out := map[string][]byte{}
	var id string
	var data []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &data}, func() error {
		if !byStage {
			var err error
			if data, err = outputAt(data, si); err != nil || data == nil {
				return err
			}
		}
		out[id] = bytes.Clone(data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDB_OutputsRepeatingTheirTextStoredMarked: a sanitize output that
// repeats the item's text is stored without it, one that changed the
// text whole, and every reader (the next stage's queue and claims, a
// batch, Locate, ForEachOutput, ForEachDone) returns each byte for
// byte as it was committed.
func TestDB_OutputsRepeatingTheirTextStoredMarked(t *testing.T) {
	db, u := openNew(t, Options{Owner: "w"})
	texts := map[string]string{
		"clean":  "bug a clean review of some length",
		"html":   "ux <b>bold</b> & more, long enough",
		"quotes": "praise \"quoted\" \\ and more 🙏🏾",
		"spaces": "bug   spaces  inside   this review",
	}
	var recs []pipeline.Record
	for id, text := range texts {
		recs = append(recs, storetest.Record(id, text, "x", "3"))
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	out := func(it pipeline.Item) []byte {
		want[it.ID] = sanitizeOut(t, it.Text, strings.Join(strings.Fields(it.Text), " "), it.ID != "html")
		return want[it.ID]
	}
	// One item through a batch job, the others through claims.
	job, items := reserveBatch(t, db, "sanitize", 1)
	if _, err := db.CommitBatch(job, []pipeline.Transition{{Stage: "sanitize", ID: items[0].ID,
		Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out(items[0])}}}); err != nil {
		t.Fatal(err)
	}
	var ts []pipeline.FencedTransition
	for _, c := range claim(t, db, "sanitize", 10) {
		f := fenced("sanitize", c)
		f.Result.Output = out(c.Item)
		ts = append(ts, f)
	}
	if _, err := db.CommitFenced(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	raw := rawOutputs(t, u, 0)
	for id, w := range want {
		if marked := refersToText(t, raw[id]); marked != (id != "spaces") {
			t.Errorf("%s stored %q: marked %v", id, raw[id], marked)
		}
		if id != "spaces" && len(raw[id]) > len(w)-len(texts[id]) {
			t.Errorf("%s stored in %d bytes, its output is %d with a text of %d", id, len(raw[id]), len(w), len(texts[id]))
		}
	}

	check := func(reader, id string, got []byte) {
		t.Helper()
		if !bytes.Equal(got, want[id]) {
			t.Errorf("%s %s: %s, want %s", reader, id, got, want[id])
		}
	}
	qs, err := db.Queued("classify", 0, 10)
	if err != nil || len(qs) != len(want) {
		t.Fatalf("Queued: %d, %v", len(qs), err)
	}
	for _, q := range qs {
		check("Queued Prev", q.Item.ID, q.Item.Prev)
		check("Queued Outputs", q.Item.ID, q.Item.Outputs["sanitize"])
	}
	for _, c := range claim(t, db, "classify", 10) {
		check("Claim", c.Item.ID, c.Item.Prev)
	}
	expireLeases(t, u)
	for id := range want {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		check("Locate", id, loc.Output["sanitize"])
	}
	if err := db.ForEachOutput("sanitize", func(r pipeline.Record, out json.RawMessage) error {
		check("ForEachOutput", r.ID, out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	job, items = reserveBatch(t, db, "classify", 10)
	if len(items) != len(want) {
		t.Fatalf("batch job %d holds %d items, want %d", job, len(items), len(want))
	}
	var results []pipeline.Transition
	for _, it := range items {
		check("BatchItems", it.ID, it.Prev)
		results = append(results, pipeline.Transition{Stage: "classify", ID: it.ID, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: storetest.Output("classify", it)}})
	}
	if _, err := db.CommitBatch(job, results); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "aggregate")
	n := 0
	if err := db.ForEachDone(func(it pipeline.Item) error {
		n++
		check("ForEachDone", it.ID, it.Outputs["sanitize"])
		return nil
	}); err != nil || n != len(want) {
		t.Fatalf("ForEachDone read %d items, %v; want %d", n, err, len(want))
	}
	storetest.Invariants(t, db)
}

// TestDB_EditKeepsMarkedOutputs: an edit of an item's text that keeps
// its output of a stage that does not read the text keeps that output
// as the stage gave it, with the old text, not the new one.
func TestDB_EditKeepsMarkedOutputs(t *testing.T) {
	stages := []pipeline.StageDef{
		{Name: "sanitize", Fingerprint: "s1", Reads: []string{"app"}},
		{Name: "classify", Fingerprint: "c1", Reads: []string{pipeline.TextField}},
		{Name: "aggregate", Fingerprint: "a1", Reads: []string{"app", "rating"}},
	}
	db, u := openNew(t, Options{Stages: stages})
	r := storetest.Record("e", "bug the text as it was first", "x", "3")
	if _, err := db.Ingest([]pipeline.Record{r}); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "sanitize")
	want := storetest.Output("sanitize", pipeline.Item{Record: r})
	if !refersToText(t, rawOutputs(t, u, 0)["e"]) {
		t.Fatalf("the sanitize output %s is not stored marked", want)
	}
	r.Text = "bug an edited text"
	if st, err := db.Ingest([]pipeline.Record{r}); err != nil || st.Changed != 1 {
		t.Fatalf("edit: %+v, %v; want 1 changed", st, err)
	}
	loc, err := db.Locate("e")
	if err != nil {
		t.Fatal(err)
	}
	if loc.Stage != "classify" || !bytes.Equal(loc.Output["sanitize"], want) {
		t.Errorf("after the edit: at %s, sanitize output %s; want at classify, %s", loc.Stage, loc.Output["sanitize"], want)
	}
}

// unmarkAll stores every marked output whole, as a sawtooth before
// schema 11 stored it, for the migration tests.
func unmarkAll(t testing.TB, url string) {
	t.Helper()
	rewriteAllOutputs(t, url, func(_ []pipeline.StageDef, _ int, data []byte, text string) ([]byte, error) {
		if storedWhole(data) {
			return nil, nil
		}
		return unmark(data, text)
	})
}

// rewriteAllOutputs stores the outputs a row per item and stage, as
// before schema 15 (downgradeRows), and in place of every output what rewrite gives
// for it (nil: it stays), given the pipeline's stages, the output's
// stage and its item's text: the loop of the fixtures that store a
// pipeline as an older sawtooth did.
func rewriteAllOutputs(t testing.TB, url string, rewrite func(stages []pipeline.StageDef, si int, data []byte, text string) ([]byte, error)) {
	t.Helper()
	unnameRecords(t, url)
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET search_path = `+DefaultSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, downgradeRows); err != nil {
		t.Fatal(err)
	}
	stages, err := readDefinition(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := conn.Query(ctx, `SELECT o.item_id, o.stage, o.data, i.record FROM output o LEFT JOIN item i USING (item_id)`)
	var ids []string
	var sts []int16
	var datas [][]byte
	var id string
	var si int16
	var data, record []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &si, &data, &record}, func() error {
		if record == nil {
			return fmt.Errorf("output of %s: no record", id)
		}
		var r pipeline.Record
		if err := decodeRecord(record, &r); err != nil {
			return err
		}
		out, err := rewrite(stages, int(si), data, r.Text)
		if err != nil {
			return fmt.Errorf("output of %s at %d: %w", id, si, err)
		}
		if out != nil {
			ids, sts, datas = append(ids, id), append(sts, si), append(datas, bytes.Clone(out))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, updateOutputsSQL, ids, sts, datas); err != nil {
		t.Fatal(err)
	}
}

// TestMigrate_OutputsMarked: a pipeline stored at schema 10 (every
// output whole) has the outputs that repeat their text stored marked
// when a writable open migrates it, and exports byte for byte as before.
func TestMigrate_OutputsMarked(t *testing.T) {
	u, before, _ := toMigrate(t)
	asSchema12(t, u)
	unmarkAll(t, u)
	downgrade(t, u, 10)
	for id, data := range rawOutputs(t, u, 0) {
		if isMarked(data) {
			t.Fatalf("the schema-10 pipeline holds a marked output of %s", id)
		}
	}

	db := openMigrated(t, u)
	raw := rawOutputs(t, u, 0)
	for id, data := range raw {
		if !refersToText(t, data) {
			t.Errorf("after the migration the sanitize output of %s is stored whole: %s", id, data)
		}
	}
	if len(raw) == 0 {
		t.Fatal("no sanitize outputs")
	}
	for id, data := range rawOutputs(t, u, 1) {
		if refersToText(t, data) {
			t.Errorf("a classify output (%s) is stored marked", id)
		}
	}
	sameExports(t, db, before)
	storetest.Invariants(t, db)
}

// reserveBatch reserves a batch job of up to max items of stage and
// reads its items as the job's driver does.
func reserveBatch(t testing.TB, db *DB, stage string, max int) (uint64, []pipeline.Item) {
	t.Helper()
	job, ok, err := db.ReserveBatch(stage, max, time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	if err != nil || !ok {
		t.Fatalf("ReserveBatch: %+v %v %v", job, ok, err)
	}
	items, err := db.BatchItems(job.Num)
	if err != nil {
		t.Fatal(err)
	}
	return job.Num, items
}

// TestMarkText_onlyATopLevelValue: an output is marked only where the
// text is one of its top-level values, so that the output's shape (read
// without the record, as FieldNames reads it) has the output's own
// keys: not where the quoted text is a key, sits inside another value,
// or spans the end of one string and the start of the next.
func TestMarkText_onlyATopLevelValue(t *testing.T) {
	for _, tc := range []struct {
		name, text, out string
		marked          bool
	}{
		{"the text is a key as well", "text", `{"text":"text"}`, true},
		{"a key only", "label", `{"label":"bug","chars":5}`, false},
		{"across two strings first", ",", `{"changes":["a","b"],"text":","}`, true},
		{"across two strings only", ",", `{"changes":["a","b"]}`, false},
		{"nested only", "a long enough text", `{"in":{"text":"a long enough text"}}`, false},
		{"spaced", "a long enough text", `{ "text" : "a long enough text" , "n" : 1 }`, true},
		{"not an object", "a long enough text", `["a long enough text"]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := markText([]byte(tc.out), tc.text)
			if isMarked(m) != tc.marked {
				t.Fatalf("markText(%s) = %q, marked %v; want %v", tc.out, m, isMarked(m), tc.marked)
			}
			if got, err := unmark(m, tc.text); err != nil || string(got) != tc.out {
				t.Errorf("unmark(markText(out)) = %q, %v; want %q", got, err, tc.out)
			}
			want, got := map[string]bool{}, map[string]bool{}
			if !objectKeys([]byte(tc.out), want) {
				return
			}
			shape, err := outputShape(m)
			if err != nil || !objectKeys(shape, got) || !maps.Equal(got, want) {
				t.Errorf("outputShape = %s (%v): keys %v; the output's are %v", shape, err, got, want)
			}
		})
	}
}

// TestDB_FieldNamesOfMarkedOutputs: the output fields FieldNames names
// (the export's columns) are the outputs' own, when an item's text is
// also the name of one of them.
func TestDB_FieldNamesOfMarkedOutputs(t *testing.T) {
	db, u := openNew(t, Options{})
	if _, err := db.Ingest([]pipeline.Record{
		storetest.Record("a", "text", "x", "1"),
		storetest.Record("b", "bug a text of some length", "x", "2"),
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	for id, data := range rawOutputs(t, u, 0) {
		if !refersToText(t, data) {
			t.Fatalf("the sanitize output of %s is stored whole: %s", id, data)
		}
	}
	_, outputs, err := db.FieldNames()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"text": true}; !maps.Equal(outputs["sanitize"], want) {
		t.Errorf("FieldNames: sanitize fields %v, want %v", outputs["sanitize"], want)
	}
}

// TestDB_FieldNamesOfAMarkedNonObject: an export that refuses a stored
// output that is not a JSON object says why from the output, not from
// its marked bytes (a tag and an offset no JSON reader knows).
func TestDB_FieldNamesOfAMarkedNonObject(t *testing.T) {
	db, u := openNew(t, Options{})
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a text of some length", "x", "1")}); err != nil {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	// ["bug a text of some length"] with its text cut out at offset 1.
	setOutput(t, u, "a", 0, []byte{markEscaped, 1, '[', ']'})
	if loc, err := db.Locate("a"); err != nil || string(loc.Output["sanitize"]) != `["bug a text of some length"]` {
		t.Fatalf("Locate: %s, %v", loc.Output["sanitize"], err)
	}
	err := report.Export(io.Discard, db, report.ExportOptions{Format: report.FormatCSV})
	if err == nil || !strings.Contains(err.Error(), `item "a": the output of sanitize is not a JSON object: json: cannot unmarshal array`) {
		t.Errorf("export: %q; want the output of sanitize named as an array, not an object", err)
	}
}
