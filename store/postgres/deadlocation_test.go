package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// deadEverywhere ingests the items of dead (stage -> ids) and a few
// that finish, and dead-letters each at its stage. Records vary in
// their fields, one only a dead item has.
func deadEverywhere(t testing.TB, db *DB, dead map[string][]string) {
	t.Helper()
	ids := []string{"done1", "done2", "done3"}
	for _, s := range storetest.Stages {
		ids = append(ids, dead[s.Name]...)
	}
	var recs []pipeline.Record
	for i, id := range ids {
		r := storetest.Record(id, []string{"bug", "ux", "praise"}[i%3]+" text of "+id, []string{"x", "y"}[i%2], []string{"", "1", "4.5"}[i%3])
		if i%4 == 1 {
			r.Fields["only_some"] = "=1+2"
		}
		if i == len(ids)-1 {
			r.Fields["only_dead"] = "the last letter's"
		}
		recs = append(recs, r)
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	for _, s := range storetest.Stages {
		storetest.Advance(t, db, s.Name, dead[s.Name]...)
	}
}

// letterIDs are n dead letters' ids, in id order.
func letterIDs(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%02d", prefix, i+1))
	}
	return out
}

// TestDB_ForEachDeadLocation_pages: every stage's dead letters, in id
// order, each as Locate gives it (its History aside), whether they fill
// no page, part of one, exactly one (the walk then reads an empty page)
// or several; the item "" among them. The pool has one connection, and
// fn calls Locate with it: a walk that held it across fn would wait
// forever.
func TestDB_ForEachDeadLocation_pages(t *testing.T) {
	tests := []struct {
		name string
		dead map[string][]string // stage -> ids, in id order
	}{
		{"no letters", nil},
		{"fewer than a page", map[string][]string{"classify": letterIDs("c", 2)}},
		{"exactly a page", map[string][]string{"classify": letterIDs("c", 3)}},
		{"a page and one", map[string][]string{"classify": letterIDs("c", 4)}},
		{"several pages at every stage", map[string][]string{
			"sanitize":  letterIDs("s", 5),
			"classify":  append([]string{""}, letterIDs("c", 7)...),
			"aggregate": letterIDs("a", 6),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(n int) { pageSize = n }(pageSize)
			pageSize = 3
			db, _ := openNew(t, Options{MaxConns: 1})
			deadEverywhere(t, db, tt.dead)
			for _, s := range storetest.Stages {
				var got []string
				err := db.ForEachDeadLocation(s.Name, func(loc pipeline.Location) error {
					want, err := db.Locate(loc.ID)
					if err != nil {
						return err
					}
					want.History = nil
					if !reflect.DeepEqual(loc, want) {
						t.Errorf("%s: ForEachDeadLocation gives\n%+v\nLocate gives\n%+v", s.Name, loc, want)
					}
					got = append(got, loc.ID)
					return nil
				})
				if err != nil || !slices.Equal(got, tt.dead[s.Name]) {
					t.Errorf("ForEachDeadLocation(%s): %q, %v; want %q", s.Name, got, err, tt.dead[s.Name])
				}
			}
		})
	}
}

// TestDB_ForEachDeadLocation_stopsAtFnsError: fn's error ends the walk
// and is returned as it is.
func TestDB_ForEachDeadLocation_stopsAtFnsError(t *testing.T) {
	defer func(n int) { pageSize = n }(pageSize)
	pageSize = 3
	db, _ := openNew(t, Options{})
	deadEverywhere(t, db, map[string][]string{"classify": letterIDs("c", 5)})
	stop := errors.New("stop")
	calls := 0
	err := db.ForEachDeadLocation("classify", func(pipeline.Location) error {
		calls++
		return stop
	})
	if err != stop || calls != 1 {
		t.Fatalf("ForEachDeadLocation with fn failing: %d calls, %v; want 1 call, %v", calls, err, stop)
	}
}

// locateEach is what an export read of a stage's dead letters before
// ForEachDeadLocation: their ids from ForEachDead, then a Locate each.
func locateEach(db *DB, stage string, fn func(pipeline.Location) error) error {
	var ids []string
	if err := db.ForEachDead(stage, func(e pipeline.DeadEntry) error { ids = append(ids, e.ID); return nil }); err != nil {
		return err
	}
	for _, id := range ids {
		loc, err := db.Locate(id)
		if err != nil {
			return err
		}
		loc.History = nil
		if err := fn(loc); err != nil {
			return err
		}
	}
	return nil
}

// TestDB_ForEachDeadLocation_damage: a damaged item among a stage's
// letters, on the walk's second page, fails as a Locate of it fails
// (ForEachDead lists a letter whose record is damaged or gone, its text
// left out), with the same error, after fn has had the letters before
// it; a letter that does not decode fails as ForEachDead fails on it;
// an item queued as well as dead is where Locate says it is.
func TestDB_ForEachDeadLocation_damage(t *testing.T) {
	tests := []struct {
		name   string
		damage string // SQL, $1 the damaged item
		ids    []string
		err    string // what the error says; "" for none
	}{
		{"record damaged", `UPDATE item SET record = '\x7b'::bytea WHERE item_id = $1`, letterIDs("c", 2), `item "c03": bad record`},
		{"record gone", `DELETE FROM item WHERE item_id = $1`, letterIDs("c", 2), `item "c03": ` + ErrNotFound.Error()},
		{"outputs damaged", `UPDATE output SET data = '\x09'::bytea WHERE item_id = $1`, letterIDs("c", 2), "bad outputs"},
		{"letter damaged", `UPDATE dead SET letter = 'not json'::bytea WHERE item_id = $1`, letterIDs("c", 2), `dead letter of "c03" at classify`},
		{"queued as well", `INSERT INTO todo (seq, stage, item_id) VALUES (nextval('todo_seq'), 0, $1)`, letterIDs("c", 5), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(n int) { pageSize = n }(pageSize)
			pageSize = 2
			db, u := openNew(t, Options{})
			deadEverywhere(t, db, map[string][]string{"classify": letterIDs("c", 5)})
			conn := connect(t, u)
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), `SET search_path = `+DefaultSchema); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(context.Background(), tt.damage, "c03"); err != nil {
				t.Fatal(err)
			}

			var got []pipeline.Location
			err := db.ForEachDeadLocation("classify", func(loc pipeline.Location) error {
				got = append(got, loc)
				return nil
			})
			var want []pipeline.Location
			for _, id := range tt.ids {
				loc, lerr := db.Locate(id)
				if lerr != nil {
					t.Fatal(lerr)
				}
				loc.History = nil
				want = append(want, loc)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("fn had\n%+v\nwant\n%+v", got, want)
			}
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v, want one that says %q", err, tt.err)
			}
			perLetterErr := locateEach(db, "classify", func(pipeline.Location) error { return nil })
			if fmt.Sprint(err) != fmt.Sprint(perLetterErr) {
				t.Errorf("error %v; a Locate per letter gives %v", err, perLetterErr)
			}
		})
	}
}
