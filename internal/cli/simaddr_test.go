package cli

import (
	"io"
	"net"
	"strings"
	"testing"
)

// sim's --addr that cannot be listened on is refused in one sentence
// saying what to give instead; it said "listen on X" three times.
func TestSim_addrRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	for _, tc := range []struct{ name, addr, want string }{
		{"in use", busy, "sim: --addr " + busy + " is in use by another program: give another port, or --addr 127.0.0.1:0"},
		{"no port", "localhost", "sim: --addr localhost: cannot listen there (missing port in address): give an address of this machine and a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runApp([]string{"sawtooth", "sim", "--addr", tc.addr}, io.Discard, io.Discard)
			if err == nil || err.Error() != tc.want && !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("sim --addr %s: %v, want %q", tc.addr, err, tc.want)
			}
			if n := strings.Count(err.Error(), tc.addr); n != 1 {
				t.Errorf("the error names %s %d times: %v", tc.addr, n, err)
			}
		})
	}
}
