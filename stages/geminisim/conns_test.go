package geminisim

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestServer_OpenConnsOutlastADeadClientsLastRequest: a client that
// writes a request and dies at once (its socket closed, the request still
// unread by the server) is counted in OpenConns until the server has read
// that request and accounted it, so "no call in flight and no connection
// open" means the accounting is final, as the kill tests read it.
func TestServer_OpenConnsOutlastADeadClientsLastRequest(t *testing.T) {
	s, url := startServer(t, Config{})
	if st := s.Stats(); st.OpenConns != 0 {
		t.Fatalf("%d connections open before any client", st.OpenConns)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Stats().OpenConns == 1 })

	lastWords(t, conn, "the last words")

	waitFor(t, func() bool { return s.Stats().OpenConns == 0 })
	st := s.Stats()
	if st.Calls != 1 || st.Items[ItemHash("the last words")].Calls != 1 || st.InFlight != 0 {
		t.Errorf("with no connection open: %d calls, %d for the dead client's item, %d in flight; want its call accounted",
			st.Calls, st.Items[ItemHash("the last words")].Calls, st.InFlight)
	}
}

// lastWords is a dying client's last call: a generateContent request for
// text written on conn, which is then closed before any answer.
func lastWords(t *testing.T, conn net.Conn, text string) {
	t.Helper()
	body := fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":%q}]}]}`, text)
	req := fmt.Sprintf("POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1\r\nHost: sim\r\n"+
		"Content-Type: application/json\r\nx-goog-api-key: %s\r\nContent-Length: %d\r\n\r\n%s", DefaultAPIKey, len(body), body)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

// queuedListener stands for the kernel's accept queue of a server whose
// accept loop is not running (a loaded machine): it takes connections
// from the real listener at once, but hands them to the server only once
// open is closed. queued counts the connections waiting.
type queuedListener struct {
	net.Listener
	open  chan struct{}
	conns chan net.Conn
}

func newQueuedListener(ln net.Listener) *queuedListener {
	q := &queuedListener{Listener: ln, open: make(chan struct{}), conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(q.conns)
				return
			}
			q.conns <- c
		}
	}()
	return q
}

func (q *queuedListener) Accept() (net.Conn, error) {
	<-q.open
	c, ok := <-q.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

func (q *queuedListener) queued() int { return len(q.conns) }

// TestServer_QuiesceWaitsForTheAcceptQueue: a dead client's last request,
// written on a connection the server has not accepted yet, is unseen by
// "no call in flight, no connection open"; Quiesce returns only once it
// has been accepted and accounted.
func TestServer_QuiesceWaitsForTheAcceptQueue(t *testing.T) {
	s := New(Config{})
	var q *queuedListener
	s.listen = func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		q = newQueuedListener(ln)
		return q, nil
	}
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opened := false
	t.Cleanup(func() {
		if !opened {
			close(q.open)
		}
		s.Close()
	})

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	lastWords(t, conn, "queued last words")
	waitFor(t, func() bool { return q.queued() == 1 })
	if st := s.Stats(); st.InFlight != 0 || st.OpenConns != 0 {
		t.Fatalf("%d in flight, %d open before any accept", st.InFlight, st.OpenConns)
	}

	done := make(chan error, 1)
	go func() { done <- s.Quiesce(context.Background()) }()
	// Quiesce's own connection queues behind the dead client's.
	for q.queued() < 2 {
		select {
		case err := <-done:
			t.Fatalf("Quiesce returned (%v) with the dead client's call still in the accept queue: %d calls accounted", err, s.Stats().Calls)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Quiesce returned (%v) before its own connection was accepted", err)
	default:
	}
	opened = true
	close(q.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Calls != 1 || st.Items[ItemHash("queued last words")].Calls != 1 {
		t.Errorf("after Quiesce: %d calls, %d for the dead client's item; want its call accounted", st.Calls, st.Items[ItemHash("queued last words")].Calls)
	}
}

// TestServer_QuiesceNeedsStart: a Server mounted elsewhere has no
// listener to fence; Quiesce says so instead of waiting.
func TestServer_QuiesceNeedsStart(t *testing.T) {
	if err := New(Config{}).Quiesce(context.Background()); err == nil || !strings.Contains(err.Error(), "Start") {
		t.Fatalf("Quiesce of an unstarted server: %v", err)
	}
}
