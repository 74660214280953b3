package geminisim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Quiesce returns once the accounting holds every call a client sent
// before Quiesce was called: each connection made before then has been
// accepted, its requests read and accounted, and closed, and no call is
// in flight. A kill test reads Stats after it to compare a dead process's
// calls with what the process committed.
//
// "No call in flight and no connection open" alone is not that: a
// connection counts as open from its accept (OpenConns), and a killed
// process's last connections can still wait in the kernel's accept queue,
// unseen, their requests written, while every accepted one has ended (the
// accept loop not scheduled on a loaded machine, or backing off an accept
// error). The accept queue is first in, first out, so Quiesce first makes
// a connection of its own and waits for its answer: once it is accepted,
// every connection queued before it has been too, and is counted open
// until it has been read and closed.
//
// It needs Start (the server listens itself); it returns ctx's error if
// ctx ends first.
func (s *Server) Quiesce(ctx context.Context) error {
	s.mu.Lock()
	addr := s.addr
	s.mu.Unlock()
	if addr == "" {
		return errors.New("geminisim: quiesce: the server was not started with Start")
	}
	if err := s.fence(ctx, "http://"+addr+"/_sim/stats"); err != nil {
		return err
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		idle := s.acct.inFlight == 0 && s.acct.openConns == 0
		s.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			st := s.Stats()
			return fmt.Errorf("geminisim: quiesce: %d calls in flight and %d connections open: %w", st.InFlight, st.OpenConns, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// fence sends one request to url on a connection of its own (no pool,
// no keep-alive) and reads its answer, trying again until ctx ends: an
// accept error or a busy machine may refuse a first try.
func (s *Server) fence(ctx context.Context, url string) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	for {
		err := fenceOnce(ctx, client, url)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("geminisim: quiesce: no answer from the server's own listener: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func fenceOnce(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
