package pgtest

import (
	"errors"
	"sync"
	"testing"
)

// Shared is the one server of a test binary: started by the first test
// that asks for a database, stopped by Stop in TestMain. A package whose
// tests mostly need no server pays nothing for it; one whose tests all
// do pays once.
type Shared struct {
	once   sync.Once
	server *Server
	err    error
}

// Server returns the running server, starting it on first use. It skips
// t when the binaries are missing (unless Required) and fails t on any
// other start error.
func (s *Shared) Server(t testing.TB) *Server {
	t.Helper()
	s.once.Do(func() { s.server, s.err = Start() })
	if s.err != nil {
		skipOrFail(t, s.err)
	}
	return s.server
}

// NewDB returns the URL of a fresh, empty database named after t on the
// shared server, skipping or failing t as Server does.
func (s *Shared) NewDB(t testing.TB) string {
	t.Helper()
	u, err := s.Server(t).NewDB(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Stop stops the server if a test started one. Call it from TestMain
// after m.Run.
func (s *Shared) Stop() {
	s.once.Do(func() { s.err = errors.New("pgtest: Shared used after Stop") })
	if s.server != nil {
		s.server.Stop()
	}
}

// StartOrSkip starts a server of t's own, stopped when t ends: for a
// test that shuts its server down or restarts it. It skips or fails t
// as Shared.Server does.
func StartOrSkip(t testing.TB) *Server {
	t.Helper()
	srv, err := Start()
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// skipOrFail skips t when err is ErrUnavailable and the server is not
// Required, and fails it otherwise.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) && !Required() {
		t.Skip(err)
	}
	t.Fatalf("start PostgreSQL: %v", err)
}
