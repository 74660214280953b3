package geminisim

import (
	"fmt"
	"net"
	"strings"
	"testing"
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

	body := `{"contents":[{"role":"user","parts":[{"text":"the last words"}]}]}`
	req := fmt.Sprintf("POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1\r\nHost: sim\r\n"+
		"Content-Type: application/json\r\nx-goog-api-key: %s\r\nContent-Length: %d\r\n\r\n%s", DefaultAPIKey, len(body), body)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	waitFor(t, func() bool { return s.Stats().OpenConns == 0 })
	st := s.Stats()
	if st.Calls != 1 || st.Items[ItemHash("the last words")].Calls != 1 || st.InFlight != 0 {
		t.Errorf("with no connection open: %d calls, %d for the dead client's item, %d in flight; want its call accounted",
			st.Calls, st.Items[ItemHash("the last words")].Calls, st.InFlight)
	}
}
