package e2e

import (
	"bytes"
	"crypto/sha256"
	endian "encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// readCommands are the commands that only read a DB.
func readCommands(db string) [][]string {
	return [][]string{
		{"status", "--db", db}, {"status", "--db", db, "--json"}, {"verify", "--db", db}, {"report", "--db", db},
		{"export", "--db", db, "--stage", "classify"}, {"dlq", "list", "--db", db},
	}
}

// runOnly is `run` on db without an input.
func runOnly(db string) []string { return []string{"run", "--db", db, "--quiet", "--timeout", "1s"} }

// TestStoreFaults breaks the DB file and the disk under the binary: each
// fault gives a clear error and exit 1 (no panic, no hang), and a DB that
// was valid before still opens, verifies and resumes afterwards.
func TestStoreFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real process")
	}
	start := time.Now()
	_, url := startSim(t, faultSim(40))
	var ta tally

	// done builds a finished DB of n items in dir.
	done := func(t *testing.T, dir string, n int) (db, input string) {
		t.Helper()
		input = writeItems(t, dir, n, 40)
		db = filepath.Join(dir, "s.db")
		if r := run(t, simEnv(url), faultArgs(db, input)...); r.code != 0 {
			t.Fatalf("setup run: exit %d\n%s", r.code, r.err)
		}
		return db, input
	}
	// fails runs args and wants exit 1 with every piece of want in stderr.
	fails := func(t *testing.T, env []string, args []string, want ...string) string {
		t.Helper()
		r := run(t, env, args...)
		if r.code != 1 {
			t.Errorf("%v: exit %d, want 1\n%s", args, r.code, tail(r.err, 2000))
		}
		for _, w := range want {
			if !strings.Contains(r.err, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, w, tail(r.err, 2000))
			}
		}
		return r.err
	}

	t.Run("faults", func(t *testing.T) {
		// The file size limit stops the DB from growing in the middle of
		// a run: exit 1 saying so, nothing dead-lettered; without the
		// limit the DB verifies and the run resumes.
		t.Run("disk full during a commit", func(t *testing.T) {
			t.Parallel()
			const n = 3000
			dir := t.TempDir()
			input := writeItems(t, dir, n, 41)
			db := filepath.Join(dir, "s.db")
			// A first run ingests and sanitizes, then stops at a bad key.
			if r := run(t, envKey(url, "wrong"), faultArgs(db, input)...); r.code != 1 {
				t.Fatalf("setup run: exit %d\n%s", r.code, r.err)
			}
			used := highWater(t, db)
			limitKB := (used + 1023) / 1024
			cmd := exec.Command("bash", append([]string{"-c", `ulimit -f "$1" && shift && exec "$@"`, "bash", fmt.Sprint(limitKB), binary}, faultArgs(db, input)...)...)
			r := runCmd(t, cmd, simEnv(url))
			if r.code != 1 || !strings.Contains(r.err, "file too large") || !strings.Contains(r.err, "the disk is full") || !strings.Contains(r.err, "the file size limit (ulimit -f)") {
				t.Fatalf("run under a %d KB file size limit: exit %d, want 1 saying the disk is full\n%s", limitKB, r.code, tail(r.err, 3000))
			}
			t.Logf("under a %d KB limit: %s", limitKB, firstLine(r.err, "sawtooth:"))
			if _, other := classifyDead(t, db); len(other) != 0 {
				t.Errorf("items dead-lettered for a full disk: %v", other)
			}
			if r := run(t, nil, "verify", "--db", db); r.code != 0 {
				t.Fatalf("verify after the failed commit: exit %d\n%s%s", r.code, r.out, r.err)
			}
			if r := run(t, simEnv(url), faultArgs(db, input)...); r.code != 0 {
				t.Fatalf("resume without the limit: exit %d\n%s", r.code, r.err)
			}
			lost, dups := settled(t, db, n)
			ta.add(1, lost, dups, 0)
		})

		// A copy cut short: every command refuses it before bbolt maps
		// the missing pages.
		t.Run("truncated DB", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			good, _ := done(t, dir, 300)
			db := filepath.Join(dir, "trunc.db")
			copyFile(t, good, db)
			if err := os.Truncate(db, highWater(t, good)/2); err != nil {
				t.Fatal(err)
			}
			for _, args := range append(readCommands(db), runOnly(db)) {
				fails(t, simEnv(url), args, "the file is truncated", "restore it from a backup")
			}
			ta.add(1, 0, 0, 0)
		})

		t.Run("garbage DB", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := filepath.Join(dir, "garbage.db")
			rng := rand.New(rand.NewPCG(1, 2))
			b := make([]byte, 100_000)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			os.WriteFile(db, b, 0o600)
			for _, args := range append(readCommands(db), runOnly(db)) {
				fails(t, simEnv(url), args, "not a database file")
			}
			ta.add(1, 0, 0, 0)
		})

		// Pages overwritten in the middle of the file: the commands that
		// read report a damaged database instead of bbolt's panic.
		t.Run("damaged pages", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			good, _ := done(t, dir, 300)
			db := filepath.Join(dir, "damaged.db")
			copyFile(t, good, db)
			f, err := os.OpenFile(db, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(bytes.Repeat([]byte{0xA5}, 40*4096), 8*4096)
			// And the root page every command reads its buckets through:
			// which pages the 40 above hold depends on how the run's
			// commits fell, and status reads only its kept counts and
			// the job (a damaged item or output page is verify's to find).
			root, size := rootPage(t, db)
			f.WriteAt(bytes.Repeat([]byte{0xA5}, size), root*int64(size))
			f.Close()
			for _, args := range readCommands(db) {
				fails(t, nil, args, "is damaged", "corrupt")
			}
			// `run` opens for writing too: the free list is synced, so no
			// page walk runs in a goroutine beyond our recover.
			fails(t, simEnv(url), []string{"run", "--db", db, "--quiet"}, "is damaged")
			ta.add(1, 0, 0, 0)
		})

		// A DB from a newer sawtooth is refused, and left untouched.
		t.Run("newer schema", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db, input := done(t, dir, 300)
			bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			bdb.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte("2")) })
			bdb.Close()
			before := fileHash(t, db)
			for _, args := range append(readCommands(db), faultArgs(db, input)) {
				fails(t, simEnv(url), args, "schema version 2, this sawtooth reads up to 1", "upgrade sawtooth")
			}
			if fileHash(t, db) != before {
				t.Errorf("the newer DB was modified by commands that refused it")
			}
			ta.add(1, 0, 0, 0)
		})

		// Two processes on one DB: the second fails at once, the first
		// finishes, and the DB verifies.
		t.Run("opened twice", func(t *testing.T) {
			t.Parallel()
			const n = 300
			dir := t.TempDir()
			input := writeItems(t, dir, n, 42)
			cfg := faultSim(42)
			cfg.Latency.Base = 100 * time.Millisecond
			_, slowURL := startSim(t, cfg)
			db := filepath.Join(dir, "s.db")
			cmd := exec.Command(binary, faultArgs(db, input, "--ceiling", "8")...)
			cmd.Env = append(os.Environ(), simEnv(slowURL)...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			deadline := time.Now().Add(20 * time.Second)
			for {
				if _, err := os.Stat(db + ".pid"); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the first run never took the DB")
				}
				time.Sleep(10 * time.Millisecond)
			}
			msg := fails(t, simEnv(slowURL), faultArgs(db, input), "in use by another sawtooth process", fmt.Sprintf("pid %d", cmd.Process.Pid))
			if strings.Count(msg, "\n") > 3 {
				t.Errorf("a locked DB takes more than a line to explain:\n%s", msg)
			}
			fails(t, nil, []string{"dlq", "requeue", "--db", db, "--stage", "classify", "--all"}, "in use by another sawtooth process")
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the first run: %v\n%s", err, errb.String())
			}
			lost, dups := settled(t, db, n)
			ta.add(1, lost, dups, 0)
		})

		// Places a DB cannot be: a path under a regular file, and a
		// directory. (Tests run as root, so a chmod-ed directory would not
		// stop them: a file as the parent is a read-only place for root
		// too.)
		t.Run("unwritable place", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, 10, 43)
			file := filepath.Join(dir, "a-file")
			os.WriteFile(file, nil, 0o600)
			under := filepath.Join(file, "s.db")
			fails(t, simEnv(url), faultArgs(under, input), "not a directory")
			fails(t, nil, []string{"status", "--db", under}, "not a directory")
			fails(t, simEnv(url), faultArgs(dir, input), dir)
			if os.Geteuid() != 0 {
				ro := filepath.Join(dir, "ro")
				os.Mkdir(ro, 0o500)
				fails(t, simEnv(url), faultArgs(filepath.Join(ro, "s.db"), input), "permission denied")
			} else {
				t.Log("running as root: a read-only directory does not stop root, so only the not-a-directory case runs")
			}
			ta.add(1, 0, 0, 0)
		})
	})
	figures(t, "store faults", ta.cases, ta.survived, ta.lost, ta.dups, ta.rep, start)
}

// highWater is the byte size of a DB's pages in use (bbolt's high water
// mark), read with bbolt directly.
func highWater(t testing.TB, db string) int64 {
	t.Helper()
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	var n int64
	bdb.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// firstLine returns the first line of s that contains sub.
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// rootPage reads the page id of the root bucket's page from the bbolt
// file's current meta page (the one with the higher transaction id), and
// the file's page size.
func rootPage(t *testing.T, path string) (pgid int64, pageSize int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := endian.LittleEndian
	// A page's header is 16 bytes; a meta holds magic, version, page
	// size, flags, the root bucket (its page id first), the free list,
	// the high water mark, then the transaction id.
	pageSize = int(le.Uint32(b[16+8:]))
	meta := b[:pageSize]
	if other := b[pageSize : 2*pageSize]; le.Uint64(other[16+48:]) > le.Uint64(meta[16+48:]) {
		meta = other
	}
	pgid = int64(le.Uint64(meta[16+16:]))
	if pgid < 2 || (pgid+1)*int64(pageSize) > int64(len(b)) {
		t.Fatalf("root page %d of %s is not a data page of its %d bytes", pgid, path, len(b))
	}
	return pgid, pageSize
}
