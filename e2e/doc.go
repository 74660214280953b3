// Package e2e holds end-to-end tests: they build the sawtooth binary, run it
// against the Gemini simulator on loopback, kill it for real and check every
// item afterwards. The package has no non-test code besides this comment.
//
// The suites (issue #5), each bounded in time and stopping by itself:
//
//	TestCrash_SIGKILLResume  SIGKILL at seeded random instants, resume, compare with a clean run
//	TestFaults               the fault matrix: 5xx, hangs, malformed bodies, safety blocks, quotas,
//	                         bad key, unknown model, the simulator going away and coming back
//	TestHostileInput         bad inputs through `sawtooth run`: line-numbered messages, bounded memory
//	TestStoreFaults          full disk (RLIMIT_FSIZE), truncated/garbage/damaged/newer DB, two
//	                         processes, unwritable places
//	TestSecurity_KeyNowhere  the API key in no artefact; 0600 files; the HTML report escapes item text
//	TestFleet_Chaos          4 worker processes on one PostgreSQL pipeline, SIGKILL and restart every
//	                         few seconds, one SIGSTOP past its lease: every item once, billing bounded
//	TestFleet_DatabaseLoss   2 workers, the PostgreSQL server stopped (immediate) mid-run: both exit 3
//	                         naming the database; restarted, the drain completes, billing bounded
//	TestFleet_FairShare      bench (SAWTOOTH_FLEET_BENCH=1): 1 vs 4 workers on one quota, shared or not
//
// Each prints a "FIGURES |" line (go test -v) for the closing table.
// SAWTOOTH_LONG=1 runs them at full size (5,000 items and 20 kills, a 10 s
// outage, a 1 GB line); SAWTOOTH_E2E_RACE=1 builds the binary with -race.
package e2e
