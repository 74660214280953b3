package monitor

import (
	"io"
	"sync"
)

// SwitchWriter writes to an override while one is set (the bars, which
// print it above themselves), else to the writer it was made with. Safe
// for concurrent use.
type SwitchWriter struct {
	mu       sync.Mutex
	w        io.Writer
	override io.Writer
}

// NewSwitchWriter returns a SwitchWriter writing to w until Set.
func NewSwitchWriter(w io.Writer) *SwitchWriter { return &SwitchWriter{w: w} }

// Set makes o the writer written to; nil goes back to the original one.
func (s *SwitchWriter) Set(o io.Writer) {
	s.mu.Lock()
	s.override = o
	s.mu.Unlock()
}

// Write writes b to the override, or to the original writer when there is
// none or the override fails (the bars refuse once they are done).
func (s *SwitchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.override != nil {
		if n, err := s.override.Write(b); err == nil {
			return n, nil
		}
	}
	return s.w.Write(b)
}
