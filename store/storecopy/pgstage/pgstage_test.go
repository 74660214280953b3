package pgstage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"github.com/sawtooth-dev/sawtooth/store/storecopy"
	"github.com/sawtooth-dev/sawtooth/store/storecopy/pgstage"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
	"go.uber.org/goleak"
)

// pg is the package's throwaway PostgreSQL server, started by the first
// test that needs one (the tests skip without one, unless
// pgtest.Required).
var pg pgtest.Shared

// TestMain stops the package's PostgreSQL server and checks no goroutine
// is left.
func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// source is a bbolt pipeline of 50 items: done, dead at classify, and
// queued at sanitize.
func source(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "source.db"), store.Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ingest := func(from, to int) {
		var recs []pipeline.Record
		for i := from; i < to; i++ {
			recs = append(recs, storetest.Record(fmt.Sprintf("i%03d", i), fmt.Sprintf("%s text %d", []string{"bug", "ux", "praise"}[i%3], i), []string{"a", "b"}[i%2], fmt.Sprint(i%5+1)))
		}
		if _, err := db.Ingest(recs); err != nil {
			t.Fatal(err)
		}
	}
	ingest(0, 40)
	storetest.Advance(t, db, "sanitize")
	storetest.Advance(t, db, "classify", "i004", "i007")
	storetest.Advance(t, db, "aggregate")
	ingest(40, 50)
	return db
}

// same fails unless the copy b holds what a does.
func same(t *testing.T, a, b pipeline.Database) {
	t.Helper()
	if err := storecopy.Compare(a, b); err != nil {
		t.Error(err)
	}
}

// schemas says whether the database at url has the schemas sawtooth (the
// pipeline's) and sawtooth_copying (a staged copy's), and how many items
// the pipeline holds.
func schemas(t *testing.T, url string) (pipeline, staged bool, items int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'sawtooth'),
		EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'sawtooth_copying')`).Scan(&pipeline, &staged)
	if err != nil {
		t.Fatal(err)
	}
	var item bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('sawtooth.item') IS NOT NULL`).Scan(&item); err != nil {
		t.Fatal(err)
	}
	if item {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM sawtooth.item`).Scan(&items); err != nil {
			t.Fatal(err)
		}
	}
	return pipeline, staged, items
}

func pgURL(t *testing.T) string {
	t.Helper()
	return pg.NewDB(t)
}

func exec(t *testing.T, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// TestTarget_AllOrNothing: a copy into PostgreSQL is staged
// under a schema no command opens and appears whole at Publish, over no
// pipeline or an empty one; one that fails, or that is closed before
// Publish, leaves the pipeline's schema as it was and drops what it
// staged; a pipeline of items, a schema of other tables and a copy
// under way refuse another before it writes.
func TestTarget_AllOrNothing(t *testing.T) {
	ctx := context.Background()
	src := source(t)
	copyInto := func(t *testing.T, url string) error {
		t.Helper()
		dst, err := pgstage.Stage(ctx, url, storetest.Stages)
		if err != nil {
			return err
		}
		defer dst.Close()
		if p, staged, _ := schemas(t, url); !staged {
			t.Errorf("nothing staged (pipeline schema there: %v)", p)
		}
		if _, err := storecopy.Copy(src, dst.DB, nil); err != nil {
			return err
		}
		return dst.Publish(ctx)
	}
	openTarget := func(t *testing.T, url string) *postgres.DB {
		t.Helper()
		db, err := postgres.Open(ctx, url, postgres.Options{Stages: storetest.Stages, MustExist: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}

	t.Run("into a new database", func(t *testing.T) {
		url := pgURL(t)
		if err := copyInto(t, url); err != nil {
			t.Fatal(err)
		}
		if p, staged, items := schemas(t, url); !p || staged || items != 50 {
			t.Errorf("after the copy: pipeline %v with %d items, staged schema left %v; want 50 items and no staged schema", p, items, staged)
		}
		same(t, src, openTarget(t, url))
	})
	t.Run("over an empty pipeline", func(t *testing.T) {
		url := pgURL(t)
		empty, err := postgres.Open(ctx, url, postgres.Options{Stages: storetest.Stages})
		if err != nil {
			t.Fatal(err)
		}
		empty.Close()
		if err := copyInto(t, url); err != nil {
			t.Fatal(err)
		}
		same(t, src, openTarget(t, url))
	})
	t.Run("stopped before Publish", func(t *testing.T) {
		url := pgURL(t)
		dst, err := pgstage.Stage(ctx, url, storetest.Stages)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := storecopy.Copy(src, dst.DB, nil); err != nil {
			t.Fatal(err)
		}
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
		if p, staged, _ := schemas(t, url); p || staged {
			t.Errorf("a copy closed unpublished left: pipeline %v, staged %v; want neither", p, staged)
		}
	})
	t.Run("a copy killed before: staged again from the start", func(t *testing.T) {
		url := pgURL(t)
		exec(t, url, `CREATE SCHEMA sawtooth_copying; CREATE TABLE sawtooth_copying.item (item_id text PRIMARY KEY)`)
		if err := copyInto(t, url); err != nil {
			t.Fatal(err)
		}
		same(t, src, openTarget(t, url))
	})

	refusals := []struct {
		name    string
		prepare func(t *testing.T, url string)
		want    func(err error) bool
	}{
		{"a pipeline of items", func(t *testing.T, url string) {
			if err := copyInto(t, url); err != nil {
				t.Fatal(err)
			}
		}, func(err error) bool {
			var e *pgstage.NotEmptyError
			return errors.As(err, &e) && e.Items == 50
		}},
		{"a schema of other tables", func(t *testing.T, url string) {
			exec(t, url, `CREATE SCHEMA sawtooth; CREATE TABLE sawtooth.mine (x int)`)
		}, func(err error) bool { return errors.Is(err, postgres.ErrNotSawtooth) }},
		{"another copy under way", func(t *testing.T, url string) {
			first, err := pgstage.Stage(ctx, url, storetest.Stages)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { first.Close() })
		}, func(err error) bool { return errors.Is(err, pgstage.ErrCopyUnderWay) }},
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			url := pgURL(t)
			tt.prepare(t, url)
			p0, staged0, items0 := schemas(t, url)
			dst, err := pgstage.Stage(ctx, url, storetest.Stages)
			if err == nil {
				dst.Close()
			}
			if !tt.want(err) {
				t.Errorf("err = %v", err)
			}
			if p, staged, items := schemas(t, url); p != p0 || staged != staged0 || items != items0 {
				t.Errorf("the refused copy changed the database: pipeline %v -> %v, staged %v -> %v, items %d -> %d", p0, p, staged0, staged, items0, items)
			}
		})
	}
}

// TestTarget_LeavesALiveRunAlone: an empty pipeline a run is live on
// (started while the copy ran, not yet ingesting) is not replaced at
// Publish. Its sessions name the pipeline's schema by name: dropped
// under the run, the run went on writing into the copy renamed there,
// its items among the copy's and its job and run record gone. A run
// live before the copy refuses it at Stage.
func TestTarget_LeavesALiveRunAlone(t *testing.T) {
	ctx := context.Background()
	src := source(t)
	startRun := func(t *testing.T, url string) *postgres.DB {
		t.Helper()
		run, err := postgres.Open(ctx, url, postgres.Options{Stages: storetest.Stages})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { run.Close() })
		if err := run.SaveRun(pipeline.RunSummary{ID: "r1", Started: time.Now(), Status: "running"}); err != nil {
			t.Fatal(err)
		}
		return run
	}
	isLive := func(err error) bool {
		var live *pgstage.LiveRunsError
		return errors.As(err, &live) && len(live.Runs) == 1 && live.Runs[0] == "r1"
	}

	t.Run("started while the copy ran", func(t *testing.T) {
		url := pgURL(t)
		dst, err := pgstage.Stage(ctx, url, storetest.Stages)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		if _, err := storecopy.Copy(src, dst.DB, nil); err != nil {
			t.Fatal(err)
		}
		run := startRun(t, url)
		if err := dst.Publish(ctx); !isLive(err) {
			t.Errorf("Publish over a live run: err = %v, want a *LiveRunsError naming r1", err)
		}
		if _, err := run.Ingest([]pipeline.Record{storetest.Record("mine", "the run's own item", "a", "5")}); err != nil {
			t.Fatal(err)
		}
		if _, _, items := schemas(t, url); items != 1 {
			t.Errorf("the run's pipeline holds %d items after its ingest, want its own 1 (the copy's 50 are not its)", items)
		}
	})
	t.Run("live before the copy", func(t *testing.T) {
		url := pgURL(t)
		startRun(t, url)
		dst, err := pgstage.Stage(ctx, url, storetest.Stages)
		if err == nil {
			dst.Close()
		}
		if !isLive(err) {
			t.Errorf("Stage over a live run: err = %v, want a *LiveRunsError naming r1", err)
		}
	})
}
