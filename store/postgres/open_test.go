package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// sql runs statements on the database at url, in the pipeline's schema,
// outside any DB handle: what another program (or damage) would do.
func sql(t testing.TB, url string, stmt string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET search_path = "+DefaultSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func TestOpen_ConcurrentFirstOpens(t *testing.T) {
	u := newURL(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	dbs := make([]*DB, n)
	for i := range n {
		wg.Go(func() {
			dbs[i], errs[i] = Open(context.Background(), u, Options{Stages: storetest.Stages})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d of %d concurrent first opens: %v", i+1, n, err)
			continue
		}
		defer dbs[i].Close()
	}
	if t.Failed() {
		return
	}
	if _, err := dbs[0].Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "1")}); err != nil {
		t.Fatal(err)
	}
	if c, err := dbs[n-1].Counts(); err != nil || c.Items != 1 {
		t.Fatalf("another handle counts %+v, %v", c, err)
	}
}

func TestOpen_Refuses(t *testing.T) {
	other := slices.Clone(storetest.Stages)
	other[1].Name = "label"
	tests := []struct {
		name    string
		prepare func(t *testing.T, url string) // nil: a new database
		opt     Options
		want    error
	}{
		{"must exist, new database", nil, Options{MustExist: true}, ErrNotFound},
		{"read-only, new database", nil, Options{ReadOnly: true}, ErrNotFound},
		{"other stages", created, Options{Stages: other}, ErrDefinition},
		{"newer schema", func(t *testing.T, url string) {
			created(t, url)
			sql(t, url, `UPDATE meta SET value = '99' WHERE key = 'schema'`)
		}, Options{}, ErrNewerSchema},
		{"a foreign meta table", func(t *testing.T, url string) {
			sql(t, url, `CREATE SCHEMA sawtooth; CREATE TABLE sawtooth.meta (key text, value bytea)`)
		}, Options{}, ErrNotSawtooth},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := newURL(t)
			if tc.prepare != nil {
				tc.prepare(t, u)
			}
			if tc.opt.Stages == nil {
				tc.opt.Stages = storetest.Stages
			}
			db, err := Open(context.Background(), u, tc.opt)
			if err == nil {
				db.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
}

// created makes the pipeline of storetest.Stages in the database at url.
func created(t *testing.T, url string) {
	t.Helper()
	db, err := Open(context.Background(), url, Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

func TestOpen_ReadOnlyAndChangedStages(t *testing.T) {
	db, u := openNew(t, Options{})
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "1")}); err != nil {
		t.Fatal(err)
	}
	changed := slices.Clone(storetest.Stages)
	changed[1].Fingerprint = "c2"
	ro, err := Open(context.Background(), u, Options{Stages: changed, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got := ro.ChangedStages(); !slices.Equal(got, []string{"classify"}) {
		t.Errorf("ChangedStages = %v, want [classify]", got)
	}
	if c, err := ro.Counts(); err != nil || c.Items != 1 {
		t.Errorf("read-only Counts = %+v, %v", c, err)
	}
	if _, err := ro.Ingest([]pipeline.Record{storetest.Record("b", "bug b", "x", "1")}); err == nil {
		t.Error("a read-only handle ingested")
	}
}

func TestOpen_SchemasAreSeparatePipelines(t *testing.T) {
	a, u := openNew(t, Options{})
	b, err := Open(context.Background(), u, Options{Stages: storetest.Stages[:1], Schema: "Other Pipeline"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "1")}); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Counts(); err != nil || c.Items != 0 {
		t.Fatalf("the other schema counts %+v, %v", c, err)
	}
}

func TestOpen_UnreachableServerKeepsPasswordOut(t *testing.T) {
	dsn := "postgres://bob:s3cret@/app?host=" + t.TempDir() + "&connect_timeout=5"
	db, err := Open(context.Background(), dsn, Options{Stages: storetest.Stages})
	if err == nil {
		db.Close()
		t.Fatal("Open of a server that does not exist succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "bob@") {
		t.Fatalf("error %q: want the DSN without its password", err)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ name, dsn, want string }{
		{"url with password", "postgres://bob:s3cret@db.example:5432/app?sslmode=require", "postgres://bob@db.example:5432/app?sslmode=require"},
		{"url password parameter", "postgresql://db/app?password=s3cret&user=bob", "postgresql://db/app?user=bob"},
		{"url without password", "postgres:///app?host=%2Ftmp", "postgres:///app?host=%2Ftmp"},
		{"keywords", "host=db user=bob password=s3cret dbname=app", "host=db user=bob dbname=app"},
		{"quoted password with spaces", `host=db password='a b\' c' dbname=app`, "host=db dbname=app"},
		{"spaces around =", "host=db password = s3cret dbname=app", "host=db dbname=app"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Redact(tc.dsn)
			if got != tc.want || strings.Contains(got, "s3cret") {
				t.Fatalf("Redact(%q) = %q, want %q", tc.dsn, got, tc.want)
			}
		})
	}
}

func TestOpen_NoCreatePrivilege(t *testing.T) {
	u := newURL(t)
	sql(t, u, `DO $$ BEGIN CREATE ROLE sawtooth_limited LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	limited := strings.Replace(u, "user=postgres", "user=sawtooth_limited", 1)
	db, err := Open(context.Background(), limited, Options{Stages: storetest.Stages})
	if err == nil {
		db.Close()
		t.Fatal("a user without CREATE on the database created the pipeline")
	}
	if !strings.Contains(err.Error(), "grant this user CREATE") {
		t.Fatalf("error %q does not say what to ask for", err)
	}
}
