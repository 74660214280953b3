package cli

import (
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
)

// shellQuote quotes s as one argument of a printed command, for a POSIX
// shell, when it holds anything but letters, digits and -_./:=+,@, so
// that the command can be copied. When s holds a control character or an
// invalid byte (a path or an item id from the input), it is written in a
// shell's $'...' form with those escaped, so that the command neither
// drives the terminal nor stops being the one to copy.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=+,@", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	escaped := strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s)
	if terminal := monitor.TerminalSafe(escaped); terminal != escaped {
		return "$'" + terminal + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
