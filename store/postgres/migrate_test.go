package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// downgrades turn a pipeline of this version into one stored by an
// older sawtooth, as far as the older version's workers can tell.
var downgrades = map[int]string{
	// After unnameRecords: records with their ids and names.
	17: `COMMENT ON TABLE item IS 'a record whose first byte is 3 is binary (binrecord.go), else JSON';
		UPDATE meta SET value = '17' WHERE key = 'schema'`,
	16: downgradeStoredHash + `UPDATE meta SET value = '16' WHERE key = 'schema'`,
	15: downgradeStoredHash + downgradeQuotesInRows + `UPDATE meta SET value = '15' WHERE key = 'schema'`,
	14: downgradeStoredHash + downgradeRows + `UPDATE meta SET value = '14' WHERE key = 'schema'`,
	13: downgradeRows + downgradeHash + `UPDATE meta SET value = '13' WHERE key = 'schema'`,
	// After asSchema12: records as JSON, no output packed.
	12: downgradeRows + downgradeHash + `COMMENT ON TABLE item IS NULL;
		COMMENT ON TABLE output IS 'an output whose first byte is 1 or 2 is stored without its item''s text (mark.go)';
		UPDATE meta SET value = '12' WHERE key = 'schema'`,
	11: downgradeRows + downgradeHash + downgradeQuotes + `UPDATE meta SET value = '11' WHERE key = 'schema'`,
	// After unmarkAll: every output stored whole.
	10: downgradeRows + downgradeHash + downgradeQuotes + `COMMENT ON TABLE output IS NULL;
		UPDATE meta SET value = '10' WHERE key = 'schema'`,
	9: downgradeRows + downgradeHash + downgradeQuotes + `CREATE INDEX output_stage ON output (stage, item_id);
		UPDATE meta SET value = '9' WHERE key = 'schema'`,
	8: downgradeRows + downgradeHash + `CREATE INDEX output_stage ON output (stage, item_id);
		DROP TABLE cube_cell, cube_quote, cube_key;
		UPDATE meta SET value = '8' WHERE key = 'schema'`,
	7: downgradeRows + downgradeHash + `CREATE INDEX output_stage ON output (stage, item_id);
		DROP TABLE cube_cell, cube_quote, cube_key;
		ALTER TABLE todo DROP COLUMN batch_sends;
		UPDATE meta SET value = '7' WHERE key = 'schema'`,
	4: downgradeRows + downgradeHash + `CREATE INDEX output_stage ON output (stage, item_id);
		DROP TABLE cube_cell, cube_quote, cube_key, batch_job, worker_session;
		DROP SEQUENCE batch_job_seq;
		ALTER TABLE todo DROP COLUMN session, DROP COLUMN batch, DROP COLUMN batch_sends;
		ALTER TABLE answer_flight DROP COLUMN session;
		UPDATE meta SET value = '4' WHERE key = 'schema'`,
}

// downgradeQuotesInRows stores the cube's quotes as schema 15 did: a
// table keyed by item, indexed in report's quote order. The rating is
// NULL: step 16 drops it, and no reader of this version reads it. A
// table output without quotes (already downgraded) is left as it is.
// downgradeRows begins with it: it rebuilds output from item_id and
// data alone, and the quotes must be out of the rows before.
const downgradeQuotesInRows = `
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'output'::regclass AND attname = 'key_id' AND NOT attisdropped) THEN
		RETURN;
	END IF;
	CREATE TABLE cube_quote (item_id text PRIMARY KEY, key_id int NOT NULL, conf float8 NOT NULL, rating float8);
	INSERT INTO cube_quote SELECT item_id, key_id, conf, NULL FROM output WHERE key_id IS NOT NULL;
	CREATE INDEX cube_quote_best ON cube_quote (key_id, conf DESC, item_id COLLATE "C");
	DROP INDEX output_quote;
	ALTER TABLE output DROP COLUMN key_id, DROP COLUMN conf;
	COMMENT ON TABLE output IS 'an item''s outputs of every stage, framed (outrow.go), each whole, marked (mark.go) or packed (pack.go)';
END $$;
`

// downgradeRows stores the outputs as schema 14 did, a row per item and
// stage, unframing each item's row (outrow.go) with a reader of its own,
// in SQL, after downgradeQuotesInRows. A table output already by stage
// is left as it is.
const downgradeRows = downgradeQuotesInRows + `
DO $$
DECLARE
	r record;
	i int;
	n int;
	st bigint;
	size int;
	sh int;
	b int;
BEGIN
	IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'output'::regclass AND attname = 'stage' AND NOT attisdropped) THEN
		RETURN;
	END IF;
	CREATE TABLE output_old (item_id text NOT NULL, stage smallint NOT NULL CHECK (stage >= 0), data bytea NOT NULL,
		PRIMARY KEY (item_id, stage));
	FOR r IN SELECT item_id, data FROM output LOOP
		IF get_byte(r.data, 0) <> 1 THEN
			RAISE EXCEPTION 'output of %: format byte %', r.item_id, get_byte(r.data, 0);
		END IF;
		i := 1;
		n := length(r.data);
		WHILE i < n LOOP
			st := 0; sh := 0;
			LOOP
				b := get_byte(r.data, i); i := i + 1;
				st := st | ((b & 127)::bigint << sh); sh := sh + 7;
				EXIT WHEN b < 128;
			END LOOP;
			size := 0; sh := 0;
			LOOP
				b := get_byte(r.data, i); i := i + 1;
				size := size | ((b & 127) << sh); sh := sh + 7;
				EXIT WHEN b < 128;
			END LOOP;
			INSERT INTO output_old VALUES (r.item_id, st, substring(r.data FROM i + 1 FOR size));
			i := i + size;
		END LOOP;
	END LOOP;
	DROP TABLE output;
	ALTER TABLE output_old RENAME TO output;
	ALTER INDEX output_old_pkey RENAME TO output_pkey;
	COMMENT ON TABLE output IS 'an output whose first byte is 1 or 2 is stored without its item''s text (mark.go), 3 packed (pack.go)';
END $$;
`

// downgradeStoredHash gives the items the content hash column of
// schemas 14 to 16 back, empty: no step before 17 reads it, and ingest
// from 17 on derives the hash.
const downgradeStoredHash = `
	ALTER TABLE item ADD COLUMN IF NOT EXISTS content_hash bytea NOT NULL DEFAULT '';
	COMMENT ON TABLE item IS 'a record whose first byte is 3 is binary (binrecord.go), else JSON; content_hash is the hash''s bytes';
`

// downgradeHash stores the content hashes as schema 13 did: in hex.
const downgradeHash = downgradeStoredHash + `
	ALTER TABLE item ALTER COLUMN content_hash TYPE text USING encode(content_hash, 'hex');
	COMMENT ON TABLE item IS 'a record whose first byte is 3 is binary (binrecord.go), else JSON';
`

// downgradeQuotes stores the cube's quote rows as schema 11 did: each
// with its cell's key and its label.
const downgradeQuotes = `
	CREATE TABLE cube_quote_old (item_id text PRIMARY KEY, cell bytea NOT NULL, label text NOT NULL, conf float8 NOT NULL, rating float8);
	INSERT INTO cube_quote_old SELECT q.item_id, k.cell, k.label, q.conf, q.rating FROM cube_quote q JOIN cube_key k ON k.id = q.key_id;
	DROP TABLE cube_quote, cube_key;
	ALTER TABLE cube_quote_old RENAME TO cube_quote;
	ALTER INDEX cube_quote_old_pkey RENAME TO cube_quote_pkey;
	CREATE INDEX cube_quote_best ON cube_quote (cell, label, conf DESC, item_id COLLATE "C");
`

// storedVersion is the schema version the pipeline at url records.
func storedVersion(t testing.TB, url string) string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, `SELECT convert_from(value, 'UTF8') FROM `+DefaultSchema+`.meta WHERE key = 'schema'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// toMigrate makes the pipeline a migration test stores as an older
// schema did: exportItems in a fresh database, closed. It returns the
// database's url; the exports of it as this version reads them, which
// the migrated pipeline must give byte for byte (sameExports); and
// every item's record as stored, by id, for a test to ingest again.
func toMigrate(t *testing.T) (u, before string, recs []pipeline.Record) {
	t.Helper()
	db, u := openNew(t, Options{})
	defer db.Close()
	exportItems(t, db)
	before = exports(t, db)
	for _, id := range slices.Sorted(maps.Keys(rawRecords(t, u))) {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, loc.Record)
	}
	return u, before, recs
}

// openMigrated opens the pipeline at u, which a test set back to an
// older schema, writable: the open migrates it. It fails unless the open
// succeeds and leaves the pipeline at SchemaVersion; the database is
// closed when the test ends.
func openMigrated(t *testing.T, u string) *DB {
	t.Helper()
	from := storedVersion(t, u)
	db, err := Open(context.Background(), u, Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatalf("open the pipeline stored at schema %s: %v", from, err)
	}
	t.Cleanup(func() { db.Close() })
	if v := storedVersion(t, u); v != strconv.Itoa(SchemaVersion) {
		t.Fatalf("after the migration from schema %s: version %s, want %d", from, v, SchemaVersion)
	}
	return db
}

// sameExports fails unless the migrated db exports byte for byte what
// the pipeline exported before (toMigrate's before).
func sameExports(t *testing.T, db *DB, before string) {
	t.Helper()
	if after := exports(t, db); after != before {
		t.Errorf("exports after the migration:\n%s\nbefore:\n%s", after, before)
	}
}

// TestMigrate_RefusesWhileOldWorkersLive: a pipeline of an older schema
// that a worker still holds (a live claim, or a live session) is not
// migrated: the open fails with ErrLiveWorkers naming the worker and
// leaves the old schema as it was; once the worker's claims and session
// are over, the same open migrates it.
func TestMigrate_RefusesWhileOldWorkersLive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		from    int
		session bool
		claims  bool
		want    []string // in the refusal, the worker's name first
	}{
		{"claim at schema 7", 7, false, true, []string{"host-b:42 (3 items claimed, leases end in "}},
		{"claim and session at schema 7", 7, true, true, []string{"host-b:42 (3 items claimed, leases end in ", "; a live session)"}},
		{"session at schema 7", 7, true, false, []string{"host-b:42 (a live session)"}},
		{"claim and session at schema 8", 8, true, true, []string{"host-b:42 (3 items claimed, leases end in ", "; a live session)"}},
		{"claim at schema 4", 4, false, true, []string{"host-b:42 (3 items claimed, leases end in "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, u := openNew(t, Options{Owner: "a"})
			ingestN(t, a, 5)
			old := worker(t, u, "host-b:42")
			if tc.session {
				beginSession(t, old)
			}
			if tc.claims {
				claim(t, old, "sanitize", 3)
			}
			a.Close()
			asSchema12(t, u)
			downgrade(t, u, tc.from)

			_, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"})
			if !errors.Is(err, ErrLiveWorkers) {
				t.Fatalf("migrating while host-b:42 is live: %v; want ErrLiveWorkers", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("the refusal %q does not say %q", err, w)
				}
			}
			if v := storedVersion(t, u); v != strconv.Itoa(tc.from) {
				t.Fatalf("after the refusal the schema is at version %s, want %d as it was", v, tc.from)
			}

			expireLeases(t, u)
			if tc.session {
				killSessions(t, u)
			}
			db, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"})
			if err != nil {
				t.Fatalf("migrating once host-b:42's claims and session are over: %v", err)
			}
			defer db.Close()
			if v := storedVersion(t, u); v != strconv.Itoa(SchemaVersion) {
				t.Fatalf("after the migration the schema is at version %s, want %d", v, SchemaVersion)
			}
			storetest.Invariants(t, db)
		})
	}
}

// TestMigrate_RefusalNamesAFewWorkers: a refusal for a large fleet names
// the first workers by name and counts the rest.
func TestMigrate_RefusalNamesAFewWorkers(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	for i := range maxNamed + 2 {
		beginSession(t, worker(t, u, fmt.Sprintf("w%02d", i)))
	}
	a.Close()
	asSchema12(t, u)
	downgrade(t, u, 7)
	_, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"})
	if !errors.Is(err, ErrLiveWorkers) || !strings.Contains(err.Error(), "w09 (a live session), and 2 more still work on it") || strings.Contains(err.Error(), "w10") {
		t.Fatalf("migrating while %d workers live: %v; want the first %d named and 2 counted", maxNamed+2, err, maxNamed)
	}
}

// TestMigrate_RefusesWhileADeadSessionsLeasesLast: a worker whose
// session the database took for dead (paused past its heartbeat) may
// still commit the answers it had sent, fenced by their claims'
// attempts, until their leases end: it learns of its session only at
// its next beat. Migrating meanwhile let it fold an item by the old
// version's rules (no cube row). The leases hold the migration back.
func TestMigrate_RefusesWhileADeadSessionsLeasesLast(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	ingestN(t, a, 5)
	old := worker(t, u, "host-b:42")
	beginSession(t, old)
	claim(t, old, "sanitize", 3)
	a.Close()
	asSchema12(t, u)
	downgrade(t, u, 8)
	killSessions(t, u)
	_, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"})
	if !errors.Is(err, ErrLiveWorkers) || !strings.Contains(err.Error(), "host-b:42 (3 items claimed, leases end in ") {
		t.Fatalf("migrating while a dead session's leases last: %v; want ErrLiveWorkers naming host-b:42's 3 claims", err)
	}
	expireLeases(t, u)
	db, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"})
	if err != nil {
		t.Fatalf("migrating once the leases ended: %v", err)
	}
	db.Close()
}

// TestMigrate_OutputsIndexedOnce: a pipeline stored at schema 9 (its
// outputs indexed by their key and again by stage) loses the second
// index when a writable open migrates it, and reads as before: the same
// export of every item and of one stage, byte for byte.
func TestMigrate_OutputsIndexedOnce(t *testing.T) {
	u, before, _ := toMigrate(t)
	asSchema12(t, u)
	downgrade(t, u, 9)
	if !hasIndex(t, u, "output_stage") {
		t.Fatal("the schema-9 pipeline has no output_stage index")
	}

	db := openMigrated(t, u)
	if hasIndex(t, u, "output_stage") {
		t.Fatal("after the migration the output_stage index is kept; want it dropped")
	}
	sameExports(t, db, before)
	storetest.Invariants(t, db)
}

// exports is db's export of every item and of classify, as JSON Lines.
func exports(t *testing.T, db *DB) string {
	t.Helper()
	var b strings.Builder
	for _, stage := range []string{"", "classify"} {
		if err := report.Export(&b, db, report.ExportOptions{Format: report.FormatJSONL, Stage: stage}); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func hasIndex(t *testing.T, url, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, DefaultSchema+"."+name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}
