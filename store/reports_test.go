package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestDB_ReportFingerprint(t *testing.T) {
	db := openTest(t)
	if _, ok, err := db.ReportFingerprint("2026-11"); err != nil || ok {
		t.Fatalf("before any report: ok=%v err=%v, want none", ok, err)
	}
	at := time.Date(2026, 11, 30, 14, 5, 0, 0, time.UTC)
	for _, fp := range []string{"f1", "f2"} { // the second replaces the first
		if err := db.SaveReportFingerprint("2026-11", pipeline.ReportStamp{Fingerprint: fp, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := db.ReportFingerprint("2026-11")
	if err != nil || !ok || got.Fingerprint != "f2" || !got.At.Equal(at) {
		t.Fatalf("got %+v ok=%v err=%v, want f2 at %v", got, ok, err, at)
	}
	if _, ok, _ := db.ReportFingerprint("2026-10"); ok {
		t.Error("another period has a stamp")
	}
}

// TestSaveReportFingerprints checks the path form used after a read-only
// report: it gives up with ErrInUse while another handle holds the file,
// writing nothing, and otherwise records the stamps and changes no item.
func TestSaveReportFingerprints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(recs("a", "b")); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	stamps := map[string]pipeline.ReportStamp{"2026-11": {Fingerprint: "f", At: time.Unix(0, 0).UTC()}}

	// db, writable and open, stands for a run holding the file.
	if err := SaveReportFingerprints(path, stamps, 10*time.Millisecond); !errors.Is(err, ErrInUse) {
		t.Fatalf("with the file held: %v, want ErrInUse", err)
	}
	before := counts(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := SaveReportFingerprints(path, stamps, 0); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	got, ok, err := ro.ReportFingerprint("2026-11")
	if err != nil || !ok || got.Fingerprint != "f" {
		t.Fatalf("after saving: %+v ok=%v err=%v", got, ok, err)
	}
	if after := counts(t, ro); after.Items != before.Items || after.Stages[1].Queued != before.Stages[1].Queued {
		t.Errorf("counts changed: before %+v, after %+v", before, after)
	}
	if problems, err := ro.Check(); err != nil || len(problems) > 0 {
		t.Errorf("check: %v %v", err, problems)
	}
}
