package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestFieldNames_firstStageErrorAcrossWalks: classify's outputs (a stage
// with cached answers) and aggregate's are read in walks of their own,
// side by side; with a damaged output in each, the error is classify's,
// the first in stage order, whichever walk ends first.
func TestFieldNames_firstStageErrorAcrossWalks(t *testing.T) {
	for i := range 20 { // either walk may end first
		db, err := Open(filepath.Join(t.TempDir(), fmt.Sprint(i, ".db")), Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close() // not openTest's: its check would find the damage
		queuedAtClassify(t, db, recs("a", "b", "c")...)
		err = db.bolt.Update(func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(answersBucket("classify")); err != nil {
				return err
			}
			if err := tx.Bucket(outBucket("classify")).Put([]byte("c"), []byte{tagRaw, '[', '1', ']'}); err != nil {
				return err
			}
			return tx.Bucket(outBucket("aggregate")).Put([]byte("a"), []byte{tagRaw, '[', '2', ']'})
		})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = db.FieldNames()
		var damaged *pipeline.DamagedError
		if !errors.As(err, &damaged) || damaged.Item != "c" || damaged.Stage != "classify" {
			t.Fatalf("FieldNames: %v, want item c's classify output damaged", err)
		}
	}
}
