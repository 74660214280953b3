package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	bolt "go.etcd.io/bbolt"
)

// oldClaimsMessage is the message the runner stored for an item claimed
// too often before the CLI worded the command.
const oldClaimsMessage = "claimed 5 times and never finished: the workers holding it died or lost their lease each time (the item may be what crashes them); inspect it with `sawtooth dlq show`, then `sawtooth retry --stage classify`"

func TestDeadMessage(t *testing.T) {
	tests := []struct {
		name, stored, want string
		cause              pipeline.DeadCause
		words              settingWords // zero: flagSettingWords
	}{
		{"old claims letter", oldClaimsMessage,
			"claimed 5 times and never finished: the workers holding it died or lost their lease each time (the item may be what crashes them)", "", settingWords{}},
		{"old template failure", "llm: prompt template failed on item \"a\": boom: fix the template or the item, then `sawtooth retry --stage llm`",
			"llm: prompt template failed on item \"a\": boom: fix the template or the item", "", settingWords{}},
		{"old aggregate hint", "aggregate: item \"a\" has no classify output to count label: re-run the item through classify (`sawtooth retry --stage classify`)",
			"aggregate: item \"a\" has no classify output to count label: re-run the item through classify", "", settingWords{}},
		{"old when failure", "when \"classify.confidence\" failed on item \"a\": boom: fix the condition, then `sawtooth rerun`",
			"when \"classify.confidence\" failed on item \"a\": boom: fix the condition", "", settingWords{}},
		{"facts only", "claimed 5 times and never finished", "claimed 5 times and never finished", "", settingWords{}},
		{"a command in the middle is the stage's text", "`sawtooth retry --stage x` was in the text: boom", "`sawtooth retry --stage x` was in the text: boom", "", settingWords{}},
		{"nothing but the command", "`sawtooth retry --stage x`", "`sawtooth retry --stage x`", "", settingWords{}},
		// A cut-off answer's letter names the budget in plain words and
		// carries its cause: shown in the words of what runs the database.
		{"budget from flags", "classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise the stage's max output tokens or lower the thinking budget",
			"classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise --max-output-tokens or lower the thinking budget",
			stages.CauseOutputBudget, flagSettingWords},
		{"budget from a job file", "triage: the answer was unusable (cut off at 8 output tokens), and again when asked once more (cut off at 16 output tokens): asking again gives the same answer; check the prompt and the output schema, or raise the stage's max output tokens",
			"triage: the answer was unusable (cut off at 8 output tokens), and again when asked once more (cut off at 16 output tokens): asking again gives the same answer; check the prompt and the output schema, or raise max_output_tokens in the job file",
			stages.CauseOutputBudget, jobSettingWords},
		// Older letters stored the words of the run that wrote them: the
		// message tells the cause, shown in today's words.
		{"old flag words, now a job file", "classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise --max-output-tokens or lower the thinking budget",
			"classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise max_output_tokens in the job file or lower the thinking budget",
			"", jobSettingWords},
		{"old job words, now flags", "triage: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): raise max_output_tokens in the job file",
			"triage: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): raise --max-output-tokens", "", flagSettingWords},
		{"old bare job key", "s: the answer was unusable (x), and again when asked once more (y): asking again gives the same answer; check the prompt and the output schema, or raise max_output_tokens",
			"s: the answer was unusable (x), and again when asked once more (y): asking again gives the same answer; check the prompt and the output schema, or raise max_output_tokens in the job file", "", jobSettingWords},
		{"another cause keeps its words", "raise the stage's max output tokens", "raise the stage's max output tokens", pipeline.CauseClaimsExhausted, jobSettingWords},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.words
			if w == (settingWords{}) {
				w = flagSettingWords
			}
			if got := deadMessage(pipeline.DeadLetter{Message: tc.stored, Cause: tc.cause}, w); got != tc.want {
				t.Errorf("deadMessage(%q) = %q, want %q", tc.stored, got, tc.want)
			}
		})
	}
}

// putDead writes a dead letter into a bbolt database by hand, as an
// older sawtooth (or the runner) left it.
func putDead(t *testing.T, path, stage, id string, d pipeline.DeadLetter) {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("dead/"+stage)).Put([]byte(id), b)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestDLQ_wordsTheNextStep: dlq show prints the item as stored and, on
// stderr, the commands that deal with its dead letter; dlq list shows an
// old letter's message without the command it was stored with. The
// database is the format 2 fixture (written by an older sawtooth), with
// two letters written by hand: an old claims letter and a new one.
func TestDLQ_wordsTheNextStep(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format2.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old db.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	putDead(t, path, "classify", "r000009", pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: oldClaimsMessage, Attempts: 5, First: now, Last: now})
	putDead(t, path, "classify", "r000011", pipeline.DeadLetter{Class: pipeline.ClassPermanent, Cause: pipeline.CauseClaimsExhausted,
		Message: "claimed 5 times and never finished: the workers holding it died or lost their lease each time (the item may be what crashes them)", Attempts: 5, First: now, Last: now})
	quoted := "'" + path + "'"

	tests := []struct {
		name, id   string
		wantOut    []string
		wantErrOut []string
	}{
		{"stored safety block", "r000006",
			[]string{"(re-queueing the same text pays for the same block again)"},
			[]string{"sawtooth run --db " + quoted + " --input FILE", "sawtooth dlq requeue --db " + quoted + " --stage classify --id r000006"}},
		{"old claims letter", "r000009",
			[]string{"then `sawtooth retry --stage classify`"}, // shown as stored
			// An older sawtooth stored no cause: the message tells it.
			[]string{"the workers holding it died", "sawtooth dlq requeue --db " + quoted + " --stage classify --id r000009"}},
		{"claims letter", "r000011",
			[]string{`"cause": "claims-exhausted"`},
			[]string{"the workers holding it died", "sawtooth dlq requeue --db " + quoted + " --stage classify --id r000011\n  sawtooth run --db " + quoted}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := runApp([]string{"sawtooth", "dlq", "show", "--db", path, "--id", tc.id}, &out, &errOut); err != nil {
				t.Fatalf("dlq show: %v\n%s", err, errOut.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.wantErrOut {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut.String())
				}
			}
		})
	}

	t.Run("list", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if err := runApp([]string{"sawtooth", "dlq", "list", "--db", path}, &out, &errOut); err != nil {
			t.Fatalf("dlq list: %v\n%s", err, errOut.String())
		}
		if strings.Contains(out.String(), "`sawtooth") || !strings.Contains(out.String(), "r000009\tpermanent (5 attempts): claimed 5 times") {
			t.Errorf("dlq list shows a stored command, or not the old letter:\n%s", out.String())
		}
		for _, w := range []string{"2 items claimed too often", "sawtooth dlq requeue --db " + quoted + " --stage STAGE --id ID"} {
			if !strings.Contains(errOut.String(), w) {
				t.Errorf("stderr lacks %q:\n%s", w, errOut.String())
			}
		}
		// The other letters are permanent: nothing to retry as it is.
		if strings.Contains(errOut.String(), "sawtooth retry") {
			t.Errorf("stderr offers a retry for permanent letters only:\n%s", errOut.String())
		}
	})
}

// TestWordSameFailure: the runner's same-failure stop is worded with the
// command that re-queues its dead letters; it is still the runner's error.
func TestWordSameFailure(t *testing.T) {
	same := &pipeline.SameFailureError{Stage: "classify", Calls: 25, Cause: "400 bad request", DeadLettered: 3}
	err := wordSameFailure(&pipeline.FatalError{Err: same, DeadLettered: 3}, "/tmp/a b.db")
	var got *pipeline.SameFailureError
	if !errors.As(err, &got) || got != same {
		t.Fatalf("errors.As lost the stop: %v", err)
	}
	if want := "3 items were dead-lettered for it: fix the cause, then re-queue them and run again:\n  sawtooth retry --db '/tmp/a b.db' --stage classify"; !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to hold %q", err, want)
	}
	if other := errors.New("boom"); wordSameFailure(other, "x.db") != other {
		t.Error("another error was reworded")
	}
}

// TestWordOldSchema: an older PostgreSQL schema refused read-only is
// worded with the migrate command for the URL given, without its
// password; it is still the store's error.
func TestWordOldSchema(t *testing.T) {
	old := &postgres.OldSchemaError{Path: "postgres://u@h/d", Version: 1, Want: 9}
	err := wordOldSchema(fmt.Errorf("status: %w", old), "postgres://u:secret@h/d")
	var got *postgres.OldSchemaError
	if !errors.As(err, &got) || got != old {
		t.Fatalf("errors.As lost the refusal: %v", err)
	}
	if want := "schema version 1 is older than this sawtooth's 9: upgrade it with `sawtooth migrate --db "; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
		t.Errorf("err = %q, want it to hold %q and no password", err, want)
	}
	if other := errors.New("boom"); wordOldSchema(other, "x") != other {
		t.Error("another error was reworded")
	}
}

// TestShellQuote_controls: an argument of a printed command is quoted for a
// shell; one with a control character is written $'...' with it
// escaped, which a shell reads back as the same bytes.
func TestShellQuote_controls(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "r000006", "r000006"},
		{"space", "a b.db", "'a b.db'"},
		{"quote", "it's", `'it'\''s'`},
		{"escape sequence", "evil\x1b[2J\a", `$'evil\x1b[2J\x07'`},
		{"control, quote and backslash", "a'\\\n", `$'a\'\\\n'`},
		{"invalid byte", "x\xff", `$'x\xff'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shellQuote(tt.in); got != tt.want {
				t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// TestDLQList_controlCharPath: dlq list words its commands with a --db
// path holding a control character as dlq show does: written $'...',
// which a shell reads back as the path, and never raw on the terminal.
func TestDLQList_controlCharPath(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format2.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "evil\x1b[2J.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := runApp([]string{"sawtooth", "dlq", "list", "--db", path}, &out, &errOut); err != nil {
		t.Fatalf("dlq list: %v\n%s", err, errOut.String())
	}
	want := "sawtooth dlq show --db $'" + strings.ReplaceAll(path, "\x1b", `\x1b`) + "' --id ID"
	if strings.Contains(errOut.String(), "\x1b") || !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q: want no raw escape and %q", errOut.String(), want)
	}
}

// TestDLQList_retryOnlyWhereRetryable: dlq list offers `retry` for a
// stage only when that stage holds a letter that failed otherwise than
// permanently: a stage holding only permanent letters gets none, though
// another stage has something to retry.
func TestDLQList_retryOnlyWhereRetryable(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format2.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	// The fixture's letters are permanent, at sanitize and at classify:
	// one at classify becomes a transient one.
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	putDead(t, path, "classify", "r000009", pipeline.DeadLetter{Class: pipeline.ClassTransient, Message: "gave up after 5 attempts: 503", Attempts: 5, First: now, Last: now})
	var out, errOut bytes.Buffer
	if err := runApp([]string{"sawtooth", "dlq", "list", "--db", path}, &out, &errOut); err != nil {
		t.Fatalf("dlq list: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "sawtooth retry --db "+path+" --stage classify") || strings.Contains(errOut.String(), "--stage sanitize") {
		t.Errorf("want a retry for classify only:\n%s", errOut.String())
	}
}

// TestDLQ_wordsTheBudgetAsStored: a cut-off answer's dead letter names
// the answer budget in the words of what the database records: the flag
// for a database run from flags (or with no job), the job file's key for
// one run from a job file, whatever the letter was stored with.
func TestDLQ_wordsTheBudgetAsStored(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	letters := map[string]pipeline.DeadLetter{
		"new": {Class: pipeline.ClassPermanent, Cause: stages.CauseOutputBudget, Attempts: 1, First: now, Last: now,
			Message: "classify: the answer was cut off at 256 output tokens, and again at 512 when asked once more (finishReason=MAX_TOKENS): asking again gives the same answer; raise the stage's max output tokens or lower the thinking budget"},
		"old": {Class: pipeline.ClassTransient, Attempts: 3, First: now, Last: now,
			Message: "classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise --max-output-tokens or lower the thinking budget"},
	}
	for _, tc := range []struct {
		name      string
		stored    *job.Stored // nil: no job recorded
		want, not string
	}{
		{"no job", nil, "raise --max-output-tokens", "max_output_tokens"},
		{"from flags", &job.Stored{YAML: "stages: []\n", Flags: true}, "raise --max-output-tokens", "max_output_tokens"},
		{"from a job file", &job.Stored{YAML: "stages: []\n"}, "raise max_output_tokens in the job file", "--max-output-tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.db")
			db, err := store.Open(path, store.Options{Stages: namedStages()})
			if err != nil {
				t.Fatal(err)
			}
			if tc.stored != nil {
				if err := db.SaveJob(tc.stored.Marshal()); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for id, d := range letters {
				putDead(t, path, "classify", id, d)
			}
			var out, errOut bytes.Buffer
			if err := runApp([]string{"sawtooth", "dlq", "list", "--db", path}, &out, &errOut); err != nil {
				t.Fatalf("dlq list: %v\n%s", err, errOut.String())
			}
			if n := strings.Count(out.String(), tc.want); n != 2 || strings.Contains(out.String(), tc.not) {
				t.Errorf("dlq list: want %q on both letters and no %q:\n%s", tc.want, tc.not, out.String())
			}
			// dlq show's next step, in the words dlq show reads
			rdb, err := openReadOnly(path)
			if err != nil {
				t.Fatal(err)
			}
			words := storedWords(rdb)
			rdb.Close()
			for id, d := range letters {
				next := deadNextStep(path, "classify", id, d, words)
				if !strings.Contains(next, "did not fit the stage's output budget: "+tc.want+", then re-queue it") || strings.Contains(next, tc.not) {
					t.Errorf("next step for %s: want %q and no %q:\n%s", id, tc.want, tc.not, next)
				}
			}
		})
	}
}

// TestSettingWords_word: a run's error that names a stage setting in
// plain words is worded with the flag or the job file's key; it is still
// the stage's error, and any other error passes unchanged.
func TestSettingWords_word(t *testing.T) {
	nf := fmt.Errorf("classify: %w", &stages.ModelNotFoundError{Model: "x",
		Err: errors.New(`triage: model "x" not found at http://h (404 NOT_FOUND): check the stage's model (e.g. gemini-2.5-flash)`)})
	same := &pipeline.FatalError{Err: &pipeline.SameFailureError{Stage: "triage", Calls: 25, DeadLettered: 25,
		Cause: "triage: the answer was cut off at 8 output tokens (finishReason=MAX_TOKENS): raise the stage's max output tokens"}}
	for _, tc := range []struct {
		name  string
		err   error
		words settingWords
		want  string
	}{
		{"model from flags", nf, flagSettingWords, "check --model (e.g. gemini-2.5-flash)"},
		{"model from a job file", nf, jobSettingWords, "check model in the job file (e.g. gemini-2.5-flash)"},
		{"budget from flags", same, flagSettingWords, "(finishReason=MAX_TOKENS): raise --max-output-tokens)"},
		{"budget from a job file", same, jobSettingWords, "(finishReason=MAX_TOKENS): raise max_output_tokens in the job file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.words.word(tc.err)
			if !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) {
				t.Errorf("word(%v) = %v, want it to hold %q and wrap the error", tc.err, got, tc.want)
			}
		})
	}
	if other := errors.New("raise the stage's max output tokens"); flagSettingWords.word(other) != other {
		t.Error("another error was reworded")
	}
}

// TestDLQRequeue_notDead: re-queueing an id that is not a dead letter of
// the stage is refused with the command that lists them, for the --db
// given; it is still the store's ErrNotFound, and nothing changed.
func TestDLQRequeue_notDead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a b.db")
	db, err := store.Open(path, store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	putDead(t, path, "classify", "r1", pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked", Attempts: 1})
	var out, errOut bytes.Buffer
	err = runApp([]string{"sawtooth", "dlq", "requeue", "--db", path, "--stage", "classify", "--id", "r2"}, &out, &errOut)
	want := "item \"r2\" is not in the dead letters of classify: not found (see `sawtooth dlq list --db '" + path + "' --stage classify`)"
	if err == nil || err.Error() != want || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("dlq requeue: %v, want %q, ErrNotFound", err, want)
	}
	out.Reset()
	if err := runApp([]string{"sawtooth", "dlq", "list", "--db", path}, &out, &errOut); err != nil || !strings.Contains(out.String(), "r1") {
		t.Errorf("after the refusal, dlq list: %v\n%s", err, out.String())
	}
}

// TestDLQ_inUseOpensOnce: dlq list and show on a database a run holds
// give up after the read-only open's own wait, as they did before they
// read the stored job for its words: that is read from the database they
// open, not by opening it once more (a bbolt file: another wait of
// store.DefaultLockTimeout for the same lock; PostgreSQL: another
// connection). The commands' own waits are made single attempts, so
// that a command opening the file once more is the only one that sleeps
// (bbolt gives up one 50 ms retry short of store.DefaultLockTimeout) and
// the bound, half that, holds on a loaded machine: without a sleep the
// commands take milliseconds.
func TestDLQ_inUseOpensOnce(t *testing.T) {
	defer func(stages, open time.Duration) { storedStagesLockWait, readOnlyLockWait = stages, open }(storedStagesLockWait, readOnlyLockWait)
	storedStagesLockWait, readOnlyLockWait = time.Nanosecond, time.Nanosecond
	path := filepath.Join(t.TempDir(), "a.db")
	db, err := store.Open(path, store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close() // held, as a run holds it
	for _, args := range [][]string{{"list"}, {"show", "--id", "r1"}} {
		start := time.Now()
		err := runApp(append([]string{"sawtooth", "dlq"}, append(args, "--db", path)...), io.Discard, io.Discard)
		if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "is in use by another sawtooth process") || took >= store.DefaultLockTimeout/2 {
			t.Errorf("dlq %s on a database in use: %v after %v, want the file in use, before %v", args[0], err, took.Round(time.Millisecond), store.DefaultLockTimeout/2)
		}
	}
}
