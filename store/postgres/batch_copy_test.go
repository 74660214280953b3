package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/store/storecopy"
)

// TestCopy_RefusesOpenBatchJobs: `sawtooth copy` of a pipeline whose
// batch job is open refuses before touching the target: neither the job
// nor the items it holds would reach the copy, and its results would land
// nowhere. The target stays empty, so a copy once the job is done works.
func TestCopy_RefusesOpenBatchJobs(t *testing.T) {
	src, _ := openNew(t, Options{Owner: "a"})
	ingestN(t, src, 3)
	if _, ok, err := src.ReserveBatch("sanitize", 2, time.Now()); err != nil || !ok {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	dst := worker(t, newURL(t), "copy")
	_, err := storecopy.Copy(src, dst, nil)
	var open *storecopy.OpenBatchJobsError
	if !errors.As(err, &open) || open.Items != 2 || open.Path != src.Path() {
		t.Fatalf("copy with an open batch job: %v, want a refusal naming the 2 held items", err)
	}
	if c, err := dst.Counts(); err != nil || c.Items != 0 {
		t.Errorf("the refused copy wrote %d items (%v) into the target", c.Items, err)
	}
}
