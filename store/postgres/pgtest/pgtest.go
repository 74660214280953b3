// Package pgtest starts a throwaway PostgreSQL server for tests: initdb into
// a fresh directory, postgres listening on a Unix socket only, fsync off.
// One server per test binary (a Shared, stopped from TestMain) keeps the
// cost to about a second; each test then creates its own database with
// NewDB. Tests of database loss start their own server (StartOrSkip),
// stop it with Shutdown (fast, or immediate as a crash would) and bring
// it back on the same data and URLs with Restart.
//
// fsync is off but synchronous_commit is on: an acknowledged commit's
// WAL is in the OS page cache, so a server crash or immediate shutdown
// loses nothing acknowledged (only an OS crash would). With
// synchronous_commit off, an immediate shutdown loses the commits of
// the last fraction of a second, which a test would take for a bug of
// the code under test.
//
// PostgreSQL refuses to run as root, so under root the cluster is created
// and served as the "postgres" user through runuser. Debian keeps initdb
// and postgres off PATH, under /usr/lib/postgresql/<version>/bin, which is
// searched as well.
//
// When the binaries cannot be found, Start returns ErrUnavailable; tests
// then skip with that message (Shared and StartOrSkip do it), unless
// SAWTOOTH_REQUIRE_POSTGRES is set (as CI sets it), in which case they
// fail.
package pgtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrUnavailable reports that no PostgreSQL server binaries were found.
var ErrUnavailable = errors.New("PostgreSQL server binaries (initdb, postgres) not found: install the distribution's postgresql package")

// Server is a running throwaway cluster. Stop removes it.
type Server struct {
	dir     string // parent of data/ and the socket
	binDir  string
	asUser  string // "" when we run as ourselves
	counter atomic.Int64

	mu sync.Mutex // guards proc and exited: Shutdown and Restart replace them
	// proc is the postmaster last started (runuser under root); exited
	// closes when it has exited.
	proc   *exec.Cmd
	exited chan struct{}
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	// On PATH, the binaries are often symlinks into the version's bin
	// directory, which alone holds all of them (pg_isready, psql, ...).
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "pg_isready")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs))) // newest version first (lexical is enough for 1x)
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", ErrUnavailable
}

// Start creates and starts a cluster. The caller must call Stop.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sawtooth-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, binDir: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.asUser = "postgres"
	}
	if out, err := s.command("initdb", "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-D", s.data()).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.launch(); err != nil {
		s.shutdown(Immediate)
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// launch starts the postmaster on the cluster's data directory and socket
// directory and waits until it accepts connections (after crash recovery,
// when the last run ended in one). The caller holds mu.
func (s *Server) launch() error {
	// -F: fsync off. synchronous_commit stays on (see the package doc).
	// autovacuum off: its ANALYZE commits a transaction of its own at
	// any moment, and a test that reads the cluster's snapshot twice
	// (TestDB_CountsReusedWithinOneSnapshot) must see only its own.
	proc := s.command("postgres", "-D", s.data(), "-k", s.dir, "-h", "", "-F",
		"-c", "full_page_writes=off", "-c", "autovacuum=off",
		"-c", "max_connections=200", "-c", "shared_buffers=64MB")
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		proc.Stdout, proc.Stderr = logf, logf
		defer logf.Close() // the child has its own copy
	}
	// Its own process group, so a test binary killed by a signal does not
	// leave the server behind holding the terminal's group.
	proc.SysProcAttr = serverProcAttr()
	if err := proc.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { proc.Wait(); close(exited) }()
	s.proc, s.exited = proc, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The socket of the last run is removed at a clean shutdown but
		// may remain after a crash: only pg_isready says the server is up.
		if _, err := os.Stat(s.socket()); err == nil {
			out, err := s.command("pg_isready", "-h", s.dir, "-U", "postgres").CombinedOutput()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("postgres did not become ready within 30 s: %s", out)
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited at start: %s", s.log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not start within 30 s: %s", s.log())
		}
	}
}

func (s *Server) socket() string { return filepath.Join(s.dir, ".s.PGSQL.5432") }

// log returns the server's log, for errors.
func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(b)
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.binDir, name)
	if s.asUser != "" {
		return exec.Command("runuser", append([]string{"-u", s.asUser, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// URL returns a connection URL for database name on this server.
func (s *Server) URL(name string) string {
	q := url.Values{"host": {s.dir}, "user": {"postgres"}, "sslmode": {"disable"}}
	return "postgres:///" + name + "?" + q.Encode()
}

// NewDB creates a fresh, empty database and returns its URL. Safe for
// concurrent use.
func (s *Server) NewDB(prefix string) (string, error) {
	// PostgreSQL cuts identifiers at 63 bytes: the unique part goes
	// first, so a long prefix (a subtest's name) cannot cut it off and
	// make two databases one.
	name := fmt.Sprintf("t%d_%d_%s", os.Getpid(), s.counter.Add(1), sanitize(prefix))
	if len(name) > 63 {
		name = name[:63]
	}
	out, err := s.command("psql", "-h", s.dir, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
		"-qc", "CREATE DATABASE "+name).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("create database %s: %v: %s", name, err, out)
	}
	return s.URL(name), nil
}

// ShutdownMode is how Shutdown stops the server (the modes of pg_ctl
// stop -m).
type ShutdownMode int

const (
	// Fast ends every session (rolling back open transactions), writes a
	// shutdown checkpoint and exits: SIGINT to the postmaster.
	Fast ShutdownMode = iota
	// Immediate ends every process at once, as a crash would: no
	// checkpoint, and the next start replays the WAL. With fsync off
	// nothing acknowledged is lost, since the WAL of every acknowledged
	// commit is in the OS page cache already (only an OS crash would
	// lose it): SIGQUIT to the postmaster.
	Immediate
)

func (m ShutdownMode) String() string {
	if m == Immediate {
		return "immediate"
	}
	return "fast"
}

// Shutdown stops the server in mode and waits until it has exited,
// keeping its data directory and socket directory: URLs stay valid, and
// Restart serves the same databases again. Shutting down a server that
// is not running does nothing. Safe for concurrent use with NewDB, which
// fails while the server is down.
func (s *Server) Shutdown(mode ShutdownMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown(mode)
}

// Kill is Shutdown(Immediate): the server stops at once, as a crash
// would (for tests of database loss).
func (s *Server) Kill() error { return s.Shutdown(Immediate) }

// Restart starts a server that Shutdown stopped, on the same data
// directory and socket, and returns once it accepts connections (after
// replaying the WAL, when it was stopped immediately). Restarting a
// running server does nothing.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		return nil
	}
	return s.launch()
}

// running reports whether the postmaster last started is still up. The
// caller holds mu.
func (s *Server) running() bool {
	if s.proc == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// shutdown is Shutdown; the caller holds mu. A server that does not stop
// within 30 s is killed.
func (s *Server) shutdown(mode ShutdownMode) error {
	if !s.running() {
		return nil
	}
	sig := syscall.SIGINT
	if mode == Immediate {
		sig = syscall.SIGQUIT
	}
	err := s.signal(sig)
	select {
	case <-s.exited:
		return err
	case <-time.After(30 * time.Second):
		s.signal(syscall.SIGKILL)
		s.proc.Process.Kill()
		<-s.exited
		return fmt.Errorf("postgres did not stop within 30 s of a %s shutdown: killed", mode)
	}
}

// signal sends sig to the postmaster itself. Under root the started
// process is runuser, which does not pass signals on: signalling it would
// leave the server running after the test binary is gone. The
// postmaster's pid is the first line of its postmaster.pid. The caller
// holds mu.
func (s *Server) signal(sig syscall.Signal) error {
	if b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && pid > 0 {
			if err := killPid(pid, sig); err == nil {
				return nil
			}
		}
	}
	return s.proc.Process.Signal(sig)
}

// Stop shuts the server down and removes its directory.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown(Immediate) // nothing to keep
	os.RemoveAll(s.dir)
}

func sanitize(p string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(p) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 || b.String()[0] >= '0' && b.String()[0] <= '9' {
		return "t_" + b.String()
	}
	return b.String()
}

// Required reports whether a missing server must fail the tests rather
// than skip them (CI sets SAWTOOTH_REQUIRE_POSTGRES=1).
func Required() bool { return os.Getenv("SAWTOOTH_REQUIRE_POSTGRES") != "" }
