package cli

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestRecordReport: the fingerprints of a report are recorded when the
// database is free, and skipped without a word while a run holds it.
func TestRecordReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	held, err := store.Open(path, store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Ingest([]pipeline.Record{{ID: "a", Text: "t"}}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	data := &report.Data{Generated: at, Periods: []report.PeriodStamp{{Period: "2026-11", Month: "2026-11", Fingerprint: "f1"}}}
	stamp := func() (pipeline.ReportStamp, bool) {
		t.Helper()
		db, err := store.Open(path, store.Options{Stages: namedStages(), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		s, ok, err := db.ReportFingerprint("2026-11")
		if err != nil {
			t.Fatal(err)
		}
		return s, ok
	}

	var errOut bytes.Buffer
	recordReport(path, data, &errOut) // held: a run has the file
	if errOut.Len() > 0 {
		t.Errorf("a held database printed %q, want nothing", errOut.String())
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := stamp(); ok {
		t.Fatal("a stamp was written while the database was held")
	}
	recordReport(path, data, &errOut)
	if s, ok := stamp(); !ok || s.Fingerprint != "f1" || !s.At.Equal(at) || errOut.Len() > 0 {
		t.Errorf("stamp %+v ok=%v, stderr %q", s, ok, errOut.String())
	}
}
