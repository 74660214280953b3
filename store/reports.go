// This file keeps the fingerprints of the figures reports were generated
// from, so that the next report of the same period can say its figures
// changed since then. It is the only thing `sawtooth report` writes.

package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// bucketReports holds period -> ReportStamp (JSON). It is created by the
// first save: files without it have no report recorded.
var bucketReports = []byte("reports")

// ReportFingerprint returns the stamp of the last report generated for
// period; ok is false when none was recorded. Works on a read-only DB.
func (db *DB) ReportFingerprint(period string) (stamp pipeline.ReportStamp, ok bool, err error) {
	err = db.view(func(tx *bolt.Tx) error {
		stamp, ok, err = readStamp(tx, period)
		return err
	})
	return stamp, ok, err
}

func readStamp(tx *bolt.Tx, period string) (pipeline.ReportStamp, bool, error) {
	b := tx.Bucket(bucketReports)
	if b == nil {
		return pipeline.ReportStamp{}, false, nil
	}
	v := b.Get([]byte(period))
	if v == nil {
		return pipeline.ReportStamp{}, false, nil
	}
	var s pipeline.ReportStamp
	if err := json.Unmarshal(v, &s); err != nil {
		return pipeline.ReportStamp{}, false, pipeline.Damaged("", "", err, "report fingerprint of %q", period)
	}
	return s, true, nil
}

// SaveReportFingerprint records stamp as the last report of period,
// replacing the one before. It writes only the reports bucket: never an
// item, an output or a run. Idempotent.
func (db *DB) SaveReportFingerprint(period string, stamp pipeline.ReportStamp) error {
	return db.update(func(tx *bolt.Tx) error {
		return putStamps(tx, map[string]pipeline.ReportStamp{period: stamp})
	})
}

func putStamps(tx *bolt.Tx, stamps map[string]pipeline.ReportStamp) error {
	b, err := tx.CreateBucketIfNotExists(bucketReports)
	if err != nil {
		return err
	}
	for period, s := range stamps {
		v, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(period), v); err != nil {
			return err
		}
	}
	return nil
}

// SaveReportFingerprints records stamps (by period) in the database at
// path, for a command that read it read-only (`sawtooth report`) and has
// closed it. It takes the file's write lock only for lockTimeout (zero:
// DefaultLockTimeout): when a run or another command holds the file it
// gives up with ErrInUse and writes nothing, so a report never waits for
// a run. Unlike Open it does nothing else to the file: no run record is
// rewritten, no bucket but the reports bucket is touched.
func SaveReportFingerprints(path string, stamps map[string]pipeline.ReportStamp, lockTimeout time.Duration) error {
	if len(stamps) == 0 {
		return nil
	}
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	if err := checkPath(path, true); err != nil {
		return err
	}
	if err := checkFile(path); err != nil {
		return err
	}
	bdb, err := openBolt(path, &bolt.Options{Timeout: lockTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		if errors.Is(err, berrors.ErrTimeout) {
			return fmt.Errorf("record the report of %s: %w", path, ErrInUse)
		}
		return openError(path, err)
	}
	db := &DB{bolt: bdb, path: path, now: time.Now}
	err = db.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil {
			return fmt.Errorf("record the report of %s: %w", path, ErrNotSawtooth)
		}
		return putStamps(tx, stamps)
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	return err
}
