// Package pgtest starts a throwaway PostgreSQL server for tests: initdb into
// a fresh directory, postgres listening on a Unix socket only, fsync off.
// One server per test binary (call Start from TestMain) keeps the cost to
// about a second; each test then creates its own database with NewDB.
//
// PostgreSQL refuses to run as root, so under root the cluster is created
// and served as the "postgres" user through runuser. Debian keeps initdb
// and postgres off PATH, under /usr/lib/postgresql/<version>/bin, which is
// searched as well.
//
// When the binaries cannot be found, Start returns ErrUnavailable; tests
// then skip with that message, unless SAWTOOTH_REQUIRE_POSTGRES is set (as
// CI sets it), in which case they fail.
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
	proc    *exec.Cmd
	exited  chan struct{}
	counter atomic.Int64
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
	s := &Server{dir: dir, binDir: bin, exited: make(chan struct{})}
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
	data := filepath.Join(dir, "data")
	if out, err := s.command("initdb", "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-D", data).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	s.proc = s.command("postgres", "-D", data, "-k", dir, "-h", "", "-F",
		"-c", "full_page_writes=off", "-c", "synchronous_commit=off",
		"-c", "max_connections=200", "-c", "shared_buffers=64MB")
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err == nil {
		s.proc.Stdout, s.proc.Stderr = logf, logf
	}
	// Its own process group, so a test binary killed by a signal does not
	// leave the server behind holding the terminal's group.
	s.proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if err := s.proc.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { s.proc.Wait(); close(s.exited) }()
	sock := filepath.Join(dir, ".s.PGSQL.5432")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			if out, err := s.command("pg_isready", "-h", dir, "-U", "postgres").CombinedOutput(); err == nil {
				break
			} else if time.Now().After(deadline) {
				s.Stop()
				return nil, fmt.Errorf("postgres did not become ready: %s", out)
			}
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited at start: %s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			s.Stop()
			return nil, fmt.Errorf("postgres did not start within 30 s: %s", log)
		}
	}
	return s, nil
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

// Kill stops the server at once, as a crash would (for tests of database
// loss); Restart brings it back on the same data.
func (s *Server) Kill() error {
	if err := s.signal(syscall.SIGQUIT); err != nil {
		return err
	}
	<-s.exited
	return nil
}

// signal sends sig to the postmaster itself. Under root the started
// process is runuser, which does not pass signals on: signalling it would
// leave the server running after the test binary is gone. The
// postmaster's pid is the first line of its postmaster.pid.
func (s *Server) signal(sig syscall.Signal) error {
	if b, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && pid > 0 {
			if err := syscall.Kill(pid, sig); err == nil {
				return nil
			}
		}
	}
	return s.proc.Process.Signal(sig)
}

// Stop shuts the server down and removes its directory.
func (s *Server) Stop() {
	if s.proc != nil && s.proc.Process != nil {
		select {
		case <-s.exited:
		default:
			s.signal(syscall.SIGQUIT) // immediate shutdown: nothing to keep
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				s.signal(syscall.SIGKILL)
				s.proc.Process.Kill()
				<-s.exited
			}
		}
	}
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
