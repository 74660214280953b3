package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestDB_CompactNotOwner: a user who may read and write the pipeline's
// tables but does not own them cannot rewrite them. VACUUM FULL would
// skip each with a warning and succeed, so Compact must refuse, naming
// the tables and what to do, instead of printing sizes it did not change.
func TestDB_CompactNotOwner(t *testing.T) {
	ctx := context.Background()
	owner, u := openNew(t, Options{})
	compactItems(t, owner)
	before := exportAll(t, owner)
	admin := connect(t, u)
	for _, s := range []string{
		`CREATE ROLE sawtooth_other LOGIN`,
		`GRANT USAGE, CREATE ON SCHEMA sawtooth TO sawtooth_other`,
		`GRANT ALL ON ALL TABLES IN SCHEMA sawtooth TO sawtooth_other`,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA sawtooth TO sawtooth_other`,
	} {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		// Roles are the cluster's, not the database's: a later test of the
		// same binary creates it again.
		admin.Exec(context.Background(), `DROP OWNED BY sawtooth_other`)
		admin.Exec(context.Background(), `DROP ROLE sawtooth_other`)
	})
	other, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := other.Query()
	q.Set("user", "sawtooth_other")
	other.RawQuery = q.Encode()
	db, err := Open(ctx, other.String(), Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatalf("open as a user who does not own the tables: %v", err)
	}
	defer db.Close()
	st, err := db.Compact(ctx, CompactOptions{})
	if err == nil || !strings.Contains(err.Error(), "this user does not own table") || !strings.Contains(err.Error(), "output") {
		t.Fatalf("Compact as a user who does not own the tables = %v, want a refusal naming them", err)
	}
	if len(st.Tables) != 0 {
		t.Errorf("Compact refused after rewriting %v", st.Tables)
	}
	if after := exportAll(t, owner); after != before {
		t.Error("export --all differs after the refused compact")
	}
}
