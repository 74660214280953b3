package postgres

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// childURLEnv makes the test binary a worker process that claims
// entries, reports them and hangs until killed (see TestMain).
const childURLEnv = "SAWTOOTH_PG_TEST_CHILD_URL"

const childOwner = "child-worker"

func claimAndHang(url string) int {
	db, err := Open(context.Background(), url, Options{Stages: storetest.Stages, Owner: childOwner})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	cs, err := db.Claim(context.Background(), "sanitize", 3, testLease)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("claimed", len(cs))
	select {} // working on them, until SIGKILL
}

// TestDB_KilledWorkersEntriesAreReclaimed: a worker process claims
// entries and is SIGKILLed; its leases hold until they end, then another
// worker claims the entries at the next attempt and commits them.
func TestDB_KilledWorkersEntriesAreReclaimed(t *testing.T) {
	db, u := openNew(t, Options{Owner: "survivor"})
	ingestN(t, db, 5)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childURLEnv+"="+u)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil || strings.TrimSpace(line) != "claimed 3" {
		t.Fatalf("the worker process said %q, %v", line, err)
	}
	if cs := claim(t, db, "sanitize", 10); len(cs) != 2 {
		t.Fatalf("while the dead worker's leases last, %d entries were claimable, want 2", len(cs))
	}
	hs, err := db.Holders(context.Background())
	if err != nil || len(hs) != 2 || hs[0].Owner != childOwner || hs[0].Held != 3 {
		t.Fatalf("Holders = %+v, %v; want the killed worker holding 3", hs, err)
	}
	expireLeases(t, u)
	cs := claim(t, db, "sanitize", 10)
	if len(cs) != 5 {
		t.Fatalf("after the leases ended, claimed %d of 5", len(cs))
	}
	var ts []pipeline.FencedTransition
	for _, c := range cs {
		ts = append(ts, fenced("sanitize", c))
	}
	if rej, err := db.CommitFenced(context.Background(), ts); err != nil || len(rej) != 0 {
		t.Fatalf("commit of the reclaimed entries: rejected %v, %v", rej, err)
	}
	storetest.Invariants(t, db)
}
