package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestBatchCommands_LeftoverSnapshot: a SIGKILLed `run --mode batch`
// leaves its snapshot behind, and its pid may since name a live process
// that is not sawtooth (here: the test itself). With the database not in
// use, list reads the database and cancel is not refused; the leftover
// snapshot is removed.
func TestBatchCommands_LeftoverSnapshot(t *testing.T) {
	sim, _, db := stoppedBatchRun(t, 4, geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}}, geminisim.EventPoll)
	leftover := func(t *testing.T) {
		t.Helper()
		b, err := json.Marshal(batchSnapshot{PID: os.Getpid(), Updated: time.Now().UTC(),
			Jobs: []pipeline.BatchJob{{Num: 1, Stage: "classify", Name: "batches/from-the-leftover-snapshot"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(batchSnapshotPath(db), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(t *testing.T) {
		t.Helper()
		if _, err := os.Stat(batchSnapshotPath(db)); !os.IsNotExist(err) {
			t.Errorf("leftover snapshot still there: %v", err)
		}
	}
	t.Run("list", func(t *testing.T) {
		leftover(t)
		var list, notes syncBuffer
		err := runApp([]string{"sawtooth", "batch", "list", "--db", db}, &list, &notes)
		if err != nil || strings.Contains(list.String(), "from-the-leftover-snapshot") || !strings.Contains(list.String(), "PENDING") {
			t.Errorf("batch list: %v\n%s", err, list.String())
		}
		if strings.Contains(notes.String(), "held by a running sawtooth") {
			t.Errorf("batch list believed the leftover snapshot:\n%s", notes.String())
		}
		gone(t)
	})
	t.Run("cancel", func(t *testing.T) {
		leftover(t)
		var stdout, stderr syncBuffer
		if err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &stdout, &stderr); err != nil {
			t.Fatalf("cancel: %v\n%s", err, stderr.String())
		}
		if bs := sim.BatchStats(); bs.Cancels != 1 {
			t.Errorf("simulator %+v: want the job cancelled", bs)
		}
		gone(t)
	})
}
