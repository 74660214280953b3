package postgres

// A record names its input fields by a number in the field_name table
// (schema step 18) instead of writing each name out: a CSV or JSONL
// input repeats the same few names on every line, 30 bytes a record of
// the reviews' five fields, more for a wide CSV. The table only grows;
// a name keeps its number for the pipeline's life.
//
// Names are registered before the transaction that stores a record that
// uses them, in a statement of their own that commits at once, and the
// cache learns a number only from the committed table. So a record that
// names a number was committed after its name was: any reader that sees
// the record finds the name in the table, and a rolled-back ingest can
// leave only an unused name behind, never a record without its name.
//
// Another worker may register a name after this handle loaded the
// table. A reader that meets such a number reads the table again on a
// connection of its own (nameReader), since the reader may be part way
// through the rows of a statement on its own connection, and the pool's
// connections may all be held by such readers.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Limits of the field_name table: a name longer than maxNameLen, or any
// name once the table holds maxFieldNames, stays written out in its
// records (tagRecord), as an input with a different set of keys on every
// line would otherwise fill the table with names used once.
const (
	maxNameLen    = 64
	maxFieldNames = 4096
)

// nameReloadTimeout bounds a reload of the table by a reader that met an
// unknown number.
const nameReloadTimeout = 30 * time.Second

// fieldNames caches the committed rows of field_name.
type fieldNames struct {
	mu     sync.RWMutex
	byName map[string]uint64
	byNum  map[uint64]string
	// read is a copy of byNum as of the last load, which name lookups
	// read without mu: every record read looks up each of its names,
	// and taking the read lock for each was most of the time.
	read atomic.Pointer[map[uint64]string]
	// full is set once the table holds maxFieldNames names: it only
	// grows, so register stops asking.
	full bool

	// connMu guards conn, the connection reloads by readers use, opened
	// at the first such reload with the pool's settings and closed by
	// close.
	connMu sync.Mutex
	conn   *pgx.Conn
	cfg    *pgx.ConnConfig
	closed bool
}

func newFieldNames(cfg *pgx.ConnConfig) *fieldNames {
	return &fieldNames{byName: map[string]uint64{}, byNum: map[uint64]string{}, cfg: cfg}
}

// rowsQuerier is what load reads the table through.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// load reads the whole table into the cache. A row never changes, so
// what it reads is added to what the cache holds: two loads at once, one
// from an older snapshot, never take a number back.
func (n *fieldNames) load(ctx context.Context, q rowsQuerier) error {
	rows, _ := q.Query(ctx, `SELECT id, name FROM field_name`)
	var num int64
	var name string
	var nums []uint64
	var names []string
	if _, err := pgx.ForEachRow(rows, []any{&num, &name}, func() error {
		nums, names = append(nums, uint64(num)), append(names, name)
		return nil
	}); err != nil {
		return fmt.Errorf("read the field names: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, num := range nums {
		n.byName[names[i]], n.byNum[num] = num, names[i]
	}
	n.publish()
	n.full = n.full || len(n.byNum) >= maxFieldNames
	return nil
}

// publish makes what byNum holds the names that lookups read; mu must
// be held.
func (n *fieldNames) publish() {
	read := maps.Clone(n.byNum)
	n.read.Store(&read)
}

// number is name's number, if it has one.
func (n *fieldNames) number(name string) (uint64, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	num, ok := n.byName[name]
	return num, ok
}

// cached is the name numbered num, if the cache holds it.
func (n *fieldNames) cached(num uint64) (string, bool) {
	read := n.read.Load()
	if read == nil {
		return "", false
	}
	name, ok := (*read)[num]
	return name, ok
}

// name is the name numbered num, reading the table again (see the file's
// doc) when the cache does not hold it: false when the table has no
// such number (a damaged record), a *nameReadError when it could not be
// read.
func (n *fieldNames) name(num uint64) (string, bool, error) {
	if n == nil {
		return "", false, nil
	}
	if name, ok := n.cached(num); ok {
		return name, true, nil
	}
	if err := n.reload(num); err != nil {
		return "", false, err
	}
	name, ok := n.cached(num)
	return name, ok, nil
}

// nameReadError is a failed read of field_name by a reader that met a
// number it did not know: the record may be sound, so it is not reported
// as damage.
type nameReadError struct{ err error }

func (e *nameReadError) Error() string { return "read the field names: " + e.err.Error() }
func (e *nameReadError) Unwrap() error { return e.err }

// reload reads the table on the reader's own connection, unless num is
// cached by then (another reader's reload). A connection that fails is
// closed and a new one tried once: it idles between reloads, and the
// server may have ended it meanwhile.
func (n *fieldNames) reload(num uint64) error {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	if _, ok := n.cached(num); ok {
		return nil
	}
	if n.closed || n.cfg == nil {
		return &nameReadError{errors.New("the store is closed")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), nameReloadTimeout)
	defer cancel()
	var err error
	for range 2 {
		if n.conn == nil {
			if n.conn, err = pgx.ConnectConfig(ctx, n.cfg); err != nil {
				n.conn = nil
				continue
			}
		}
		if err = n.load(ctx, n.conn); err == nil {
			return nil
		}
		n.conn.Close(ctx)
		n.conn = nil
	}
	return &nameReadError{err}
}

// close closes the reader's connection, if one was opened.
func (n *fieldNames) close() {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	n.closed = true
	if n.conn != nil {
		n.conn.Close(context.Background())
		n.conn = nil
	}
}

// nameNumberable reports whether name may have a number: short, and a
// string a text column holds (valid UTF-8, no NUL; a record with
// invalid UTF-8 is stored as JSON anyway).
func nameNumberable(name string) bool {
	return len(name) <= maxNameLen && utf8.ValidString(name) && strings.IndexByte(name, 0) < 0
}

// register gives a number to every name of recs that may have one and
// has none yet, in a statement that commits at once, and loads the
// table. Names past the limits are left out: their records are written
// with their names.
func (n *fieldNames) register(ctx context.Context, pool *pgxpool.Pool, recs []pipeline.Record) error {
	missing := n.unnumbered(recs)
	if len(missing) == 0 {
		return nil
	}
	// A deadlock or serialization failure is tried again (see
	// insertNames).
	var err error
	for range 5 {
		if err = insertNames(ctx, pool, missing); !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("register field names: %w", err)
	}
	return n.load(ctx, pool)
}

// unnumbered is the names of recs that may have a number and have none
// in the cache, sorted; none once the table is full.
func (n *fieldNames) unnumbered(recs []pipeline.Record) []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.full {
		return nil
	}
	var missing []string
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] || !nameNumberable(name) {
			return
		}
		seen[name] = true
		if _, ok := n.byName[name]; !ok {
			missing = append(missing, name)
		}
	}
	for _, r := range recs {
		for k := range r.Fields {
			add(k)
		}
		for k := range r.Types {
			add(k)
		}
	}
	slices.Sort(missing)
	return missing
}

// execer is what insertNames writes through.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertNames numbers the names (sorted) field_name does not hold yet,
// up to its limit, in their order: two workers registering the same
// names at once wait on each other's rows in one order, never in a
// circle. Two registrations at once may pass the limit together by a
// few names: it bounds the table's growth, not its exact size.
func insertNames(ctx context.Context, q execer, names []string) error {
	_, err := q.Exec(ctx, `INSERT INTO field_name (name)
		SELECT k FROM unnest($1::text[]) AS k WHERE NOT EXISTS (SELECT 1 FROM field_name f WHERE f.name = k)
		ORDER BY k LIMIT greatest(0, $2 - (SELECT count(*) FROM field_name))
		ON CONFLICT (name) DO NOTHING`, names, maxFieldNames)
	return err
}
