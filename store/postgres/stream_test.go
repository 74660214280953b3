package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// pagedReads is the PostgreSQL store as it read whole tables before
// stream.go: keyset pages of a few items, each record decoded by
// encoding/json, an item's outputs aggregated into arrays, and no
// FieldNames (its pipeline.Database hides it), so an export reads the
// items twice. Exports through it are what stream.go must reproduce.
type pagedReads struct {
	pipeline.Database
	db *DB
}

const pagedSize = 3

func (p pagedReads) ForEachDone(fn func(pipeline.Item) error) error {
	db := p.db
	after := ""
	for {
		rows, _ := db.pool.Query(db.ctx, `SELECT x.item_id, x.record, o.data FROM item x
			LEFT JOIN output o ON o.item_id = x.item_id
			WHERE x.item_id > $1 AND NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = x.item_id)
			AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = x.item_id)
			ORDER BY x.item_id LIMIT $2`, after, pagedSize)
		var page []pipeline.Item
		var id string
		var record, row []byte
		_, err := pgx.ForEachRow(rows, []any{&id, &record, &row}, func() error {
			it := pipeline.Item{Outputs: map[string]json.RawMessage{}}
			if err := jsonOrBinaryRecord(db, id, record, &it.Record); err != nil {
				return err
			}
			entries, err := outputEntries(row)
			if err != nil {
				return err
			}
			for _, e := range entries {
				out, err := unmark(e.data, it.Record.Text) // as stored whole before mark.go
				if err != nil {
					return err
				}
				it.Outputs[db.stages[e.stage].Name] = out
			}
			page = append(page, it)
			row = nil
			return nil
		})
		if err != nil {
			return err
		}
		for _, it := range page {
			if err := fn(it); err != nil {
				return err
			}
		}
		if len(page) < pagedSize {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

func (p pagedReads) ForEachOutput(stage string, fn func(rec pipeline.Record, out json.RawMessage) error) error {
	db := p.db
	si, err := db.stageIndex(stage)
	if err != nil {
		return err
	}
	rows, _ := db.pool.Query(db.ctx, `SELECT o.item_id, o.data, i.record FROM output o JOIN item i USING (item_id)
		ORDER BY o.item_id`)
	type recOut struct {
		rec pipeline.Record
		out json.RawMessage
	}
	var all []recOut
	var id string
	var row, record []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &row, &record}, func() error {
		data, err := outputAt(row, si)
		if err != nil || data == nil {
			return err
		}
		var r recOut
		if err := jsonOrBinaryRecord(db, id, record, &r.rec); err != nil {
			return err
		}
		out, err := unmark(data, r.rec.Text) // as stored whole before mark.go
		r.out = out
		all = append(all, r)
		return err
	})
	if err != nil {
		return err
	}
	for _, r := range all {
		if err := fn(r.rec, r.out); err != nil {
			return err
		}
	}
	return nil
}

// exportItems are done items whose records and outputs take both of
// decodeRecord's paths (escapes, control characters, types, a line),
// with input fields only some have (one only a queued item has, which
// no column may name, one only an item dead at classify has), a field
// named like a fixed column, two items dead at classify and one queued.
func exportItems(t *testing.T, db *DB) {
	t.Helper()
	var recs []pipeline.Record
	for i := range 40 {
		id := fmt.Sprintf("%c%02d", "aBcD"[i%4], i)
		label := []string{"bug", "ux", "praise"}[i%3]
		text := []string{"plain", "with \"quotes\"\nand a new line", "émoji 🙏🏾 <b>&</b>", "tab\there\u2028"}[i%4]
		r := storetest.Record(id, label+" "+text, []string{"x", "y"}[i%2], []string{"", "1", "2.5", "1e17"}[i%4])
		switch i % 5 {
		case 1:
			r.Fields["status"] = "a field named status"
		case 2:
			r.Fields["only_some"] = "=1+2"
			r.Types = map[string]pipeline.FieldType{"rating": pipeline.FieldNumber}
		case 3:
			r.Line = i + 1
		}
		if id == "a08" {
			r.Fields["only_dead"] = "dead at classify"
		}
		recs = append(recs, r)
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "sanitize")
	storetest.Advance(t, db, "classify", "D03", "a08")
	storetest.Advance(t, db, "aggregate")
	q := storetest.Record("q", "bug queued", "x", "1")
	q.Fields["only_queued"] = "never a column"
	if _, err := db.Ingest([]pipeline.Record{q}); err != nil {
		t.Fatal(err)
	}
}

// TestDB_ExportSameAsPaged: report's exports of a PostgreSQL pipeline,
// streamed with its field names read first, are byte for byte those of
// the paged reads before, in every format, of every item and of one
// stage, with and without --columns; and a report with --where, which
// streams the done items, loads the same data.
func TestDB_ExportSameAsPaged(t *testing.T) {
	db, _ := openNew(t, Options{})
	exportItems(t, db)
	old := pagedReads{Database: db, db: db}
	for _, format := range []string{report.FormatJSONL, report.FormatCSV, report.FormatTSV} {
		for _, o := range []report.ExportOptions{
			{},
			{Stage: "classify"},
			{Stage: "sanitize"},
			{Columns: []string{"id", "status", "dead_reason", "only_some", "classify.label", "input.status"}},
			{Stage: "classify", Columns: []string{"label", "id", "app"}},
			{RawCells: true},
		} {
			o.Format = format
			t.Run(fmt.Sprintf("%s %s %v raw %v", format, o.Stage, o.Columns, o.RawCells), func(t *testing.T) {
				var want, got bytes.Buffer
				if err := report.Export(&want, old, o); err != nil {
					t.Fatalf("paged: %v", err)
				}
				if err := report.Export(&got, db, o); err != nil {
					t.Fatalf("streamed: %v", err)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Errorf("streamed export:\n%s\npaged export:\n%s", got.String(), want.String())
				}
				if strings.Contains(got.String(), "only_queued") || !strings.Contains(want.String(), "D03") && o.Stage == "" && o.Columns == nil {
					t.Errorf("export names a queued item's field or misses the dead:\n%s", got.String())
				}
			})
		}
	}
	now := func() time.Time { return time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC) }
	for _, where := range [][]report.Filter{{{Field: "app", Value: "x"}}, {{Field: "label", Value: "bug"}, {Field: "only_some", Value: "=1+2"}}} {
		t.Run(fmt.Sprint("where ", where), func(t *testing.T) {
			want, err := report.Load(old, report.LoadOptions{By: []string{"app", "month"}, Where: where, Now: now})
			if err != nil {
				t.Fatalf("paged: %v", err)
			}
			got, err := report.Load(db, report.LoadOptions{By: []string{"app", "month"}, Where: where, Now: now})
			if err != nil {
				t.Fatalf("streamed: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("report --where %v: streamed\n%+v\npaged\n%+v", where, got, want)
			}
		})
	}
}

// TestDB_ForEachDone_sessionEndedAfterTheLastRow: a caller slow over
// rows the server has already sent (an export into a paused pipe) may
// find the stream's session ended meanwhile, idle in its transaction
// past DefaultIdleInTransaction (here ended at once). The snapshot was
// only read from and every row came: the walk gives every done item
// and no error.
func TestDB_ForEachDone_sessionEndedAfterTheLastRow(t *testing.T) {
	db, _ := openNew(t, Options{})
	exportItems(t, db)
	c, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = db.ForEachDone(func(it pipeline.Item) error {
		if n == 0 {
			endIdleStream(t, db, "LEFT JOIN output o ON")
		}
		n++
		return nil
	})
	if err != nil || n != c.Done {
		t.Fatalf("ForEachDone with its session ended after the last row: %d items, %v; want %d, no error", n, err, c.Done)
	}
}

// endIdleStream waits for the session whose statement contains query
// to sit idle in its transaction (the server has sent every row), then
// ends it as idle_in_transaction_session_timeout would.
func endIdleStream(t testing.TB, db *DB, query string) {
	t.Helper()
	for range 1000 {
		var ended int
		err := db.pool.QueryRow(db.ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			AND state = 'idle in transaction' AND strpos(query, $1) > 0`, query).Scan(&ended)
		if err != nil {
			t.Fatal(err)
		}
		if ended == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no session sat idle in a transaction after %q", query)
}
