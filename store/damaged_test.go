package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestCachedAnswer_damaged: a cached answer that cannot be read is a
// *pipeline.DamagedError naming the stage and the key (the runner then
// asks again), and the store names no command.
func TestCachedAnswer_damaged(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.RestoreAnswers("classify", map[string]pipeline.Result{"k1": {Output: []byte(`{"label":"bug"}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(answersBucket("classify")).Put(answerKey("k1"), []byte{0xff, 0xff, 0xff})
	}); err != nil {
		t.Fatal(err)
	}
	_, found, err := db.CachedAnswer("classify", "k1")
	var d *pipeline.DamagedError
	if found || !errors.As(err, &d) || d.Stage != "classify" || !strings.Contains(err.Error(), "cached answer k1 at classify is damaged") {
		t.Fatalf("CachedAnswer = found %v, %v; want a DamagedError at classify naming k1", found, err)
	}
	if strings.Contains(err.Error(), "sawtooth") {
		t.Errorf("the store names a command: %q", err)
	}
}
