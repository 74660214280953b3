package postgres

import (
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

func TestDB_CheckFindsDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage string // SQL
		want   string
		edit   func(t testing.TB, url string) // damage of a row of outputs, before damage
	}{
		{"a done item lost an output", `SELECT 1`, `item "a": 2 outputs of stages 0..2 at position 3`, func(t testing.TB, u string) { setOutput(t, u, "a", 1, nil) }},
		{"queued and dead", `INSERT INTO dead (item_id, stage, letter) SELECT item_id, 0, '{}' FROM todo WHERE item_id = 'q'`, `item "q" is both queued and dead`, nil},
		{"an orphan output", `INSERT INTO output (item_id, data) VALUES ('ghost', '\x0100027b7d')`, `item "ghost" has no record but rows in output`, nil},
		{"a row of outputs that does not unframe", `UPDATE output SET data = data || '\x0109' WHERE item_id = 'a'`, `item "a": its row of outputs is damaged`, nil},
		{"a row of outputs of another format", `UPDATE output SET data = '\x02' || substr(data, 2) WHERE item_id = 'a'`, `item "a": its row of outputs is damaged`, nil},
		{"an output of an unknown stage", `UPDATE output SET data = data || '\x07027b7d' WHERE item_id = 'a'`, `item "a": a row of output names a stage this pipeline does not have`, nil},
		{"stages out of order", `UPDATE output SET data = data || '\x00027b7d' WHERE item_id = 'a'`, `stage 0 after stage 2`, nil},
		{"a tally counter off by one", `UPDATE tally_label SET n = n + 1 WHERE label = 'bug'`, `aggregate: stored != recomputed`, nil},
		{"a cube counter off by one", `UPDATE cube_cell SET n = n + 1 WHERE label = 'bug'`, `cube: cell`, nil},
		{"a done item's quote lost", `UPDATE output SET key_id = NULL, conf = NULL WHERE item_id = 'a'`, `cube: done item "a" has no quote`, nil},
		{"a quote with another confidence", `UPDATE output SET conf = 0.5 WHERE item_id = 'b'`, `cube: the quote of item "b" is not its fact's`, nil},
		{"a quote naming no cube key", `UPDATE output SET key_id = (SELECT max(id) + 1 FROM cube_key) WHERE item_id = 'b'`, `cube: the quote of item "b" is not its fact's`, nil},
		{"a quote of a queued item", `UPDATE output SET data = '\x0100027b7d', key_id = (SELECT min(id) FROM cube_key), conf = 0 WHERE item_id = 'a';
			INSERT INTO todo (seq, item_id, stage) VALUES (1000000, 'a', 1)`, `cube: item "a" is not done but has a quote`, nil},
		{"an unknown stage", `UPDATE todo SET stage = 7 WHERE item_id = 'q'`, `names a stage this pipeline does not have`, nil},
		{"a record that does not read", `UPDATE item SET record = '\x0305ab' WHERE item_id = 'q'`, `item "q": its record is damaged`, nil},
		{"a record naming a field number field_name lacks", `UPDATE item SET record = '\x04000163000000' WHERE item_id = 'a'`, `item "a": its record is damaged`, nil},
		{"a record of another item", `UPDATE item SET record = '\x03016100000000' WHERE item_id = 'b'`, `item "b": its record is item "a"'s`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, u := openNew(t, Options{})
			if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "1"), storetest.Record("b", "bug b", "x", "2")}); err != nil {
				t.Fatal(err)
			}
			storetest.Finish(t, db)
			if _, err := db.Ingest([]pipeline.Record{storetest.Record("q", "ux q", "x", "")}); err != nil {
				t.Fatal(err)
			}
			if p, err := db.Check(); err != nil || len(p) > 0 {
				t.Fatalf("Check before the damage: %v %v", p, err)
			}
			if tc.edit != nil {
				tc.edit(t, u)
			}
			sql(t, u, tc.damage)
			p, err := db.Check()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(p, "\n"), tc.want) {
				t.Fatalf("Check = %q, want a line with %q", p, tc.want)
			}
		})
	}
}
