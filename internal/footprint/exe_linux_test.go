package footprint

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// exeResident is the resident kB of the test binary's read-only private
// mappings.
func exeResident(t *testing.T) int {
	t.Helper()
	st, err := os.Stat("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	ino := strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kb, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if header(fs) {
			in = len(fs) >= 6 && fs[4] == ino && (fs[1] == "r-xp" || fs[1] == "r--p")
			continue
		}
		if in && len(fs) >= 2 && fs[0] == "Rss:" {
			n, _ := strconv.Atoi(fs[1])
			kb += n
		}
	}
	return kb
}

func TestReleaseExecutable_dropsResidentPagesAndKeepsRunning(t *testing.T) {
	before := exeResident(t)
	if before == 0 {
		t.Skip("the test binary has no resident read-only mapping to release")
	}
	if n := ReleaseExecutable(); n == 0 {
		t.Fatal("released nothing")
	}
	// The code below runs from pages read back from the file: what the
	// release dropped was the file's own bytes.
	after := exeResident(t)
	if after >= before {
		t.Fatalf("resident pages of the executable: %d kB before, %d kB after the release", before, after)
	}
	if got := strings.Repeat("ab", 3); got != "ababab" {
		t.Fatalf("code after the release computes %q", got)
	}
}

// BenchmarkReleaseExecutable is the cost of one release and of the
// refaults that follow it (the benchmark loop's own code and what the
// runtime touches), per op.
func BenchmarkReleaseExecutable(b *testing.B) {
	for b.Loop() {
		ReleaseExecutable()
	}
}
