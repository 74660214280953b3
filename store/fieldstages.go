package store

import (
	bolt "go.etcd.io/bbolt"
)

// stagesFieldNames adds the top-level keys of each stage's stored
// outputs to outputs, by stage, for FieldNames; a stage without an
// output has no entry. The stages whose outputs refer to cached answers
// are read in one walk, so their answer tables share one budget
// (answertable.go); the others are read beside them, in a walk of their
// own: at a million reviews the first walk (classify's outputs and its
// answers) and the second (sanitize's and aggregate's outputs) each took
// about a second, one after the other, while the records' walk beside
// them took a second and a half. The error is the first stage's in
// stage order, as when one walk read them all in turn.
func (db *DB) stagesFieldNames(outputs map[string]map[string]bool) error {
	var cached, plain []int
	err := db.view(func(tx *bolt.Tx) error {
		for si, st := range db.stages {
			if tx.Bucket(answersBucket(st.Name)) != nil {
				cached = append(cached, si)
			} else {
				plain = append(plain, si)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	found := make([]map[string]bool, len(db.stages))
	errs := make([]error, len(db.stages))
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.someStagesFieldNames(plain, found, errs)
	}()
	db.someStagesFieldNames(cached, found, errs)
	<-done
	for si, st := range db.stages {
		if errs[si] != nil {
			return errs[si]
		}
		if found[si] != nil {
			outputs[st.Name] = found[si]
		}
	}
	return nil
}

// someStagesFieldNames reads the keys of the outputs of the stages sis,
// in turn in one walk, into found[si] (nil when the stage has no
// output); it stops at a stage's error, which it puts in errs[si].
func (db *DB) someStagesFieldNames(sis []int, found []map[string]bool, errs []error) {
	if len(sis) == 0 {
		return
	}
	at := sis[0]
	err := db.walk(func(tx *bolt.Tx, w *walker) error {
		for _, si := range sis {
			at = si
			names, err := db.stageFieldNames(tx, w, si)
			if err != nil {
				return err
			}
			found[si] = names
		}
		return nil
	})
	if err != nil {
		errs[at] = err
	}
}

// stageFieldNames reads the keys of stage si's outputs in tx: nil when
// the stage has no output.
func (db *DB) stageFieldNames(tx *bolt.Tx, w *walker, si int) (map[string]bool, error) {
	st := db.stages[si]
	names := map[string]bool{}
	any := false
	// An output that refers to a cached answer has that answer's
	// keys: the answers are read after the walk, each once, in
	// their key order. Read per item in id order, the answers
	// (keyed by hash) were a page anywhere in the file per item:
	// 1M faults, a third of a real run's 1M export.
	var refs answerRefs
	err := tx.Bucket(outBucket(st.Name)).ForEach(func(k, v []byte) error {
		w.step()
		if v == nil {
			return nil // a nested bucket (a damaged file): no output, as ForEachItem reads it
		}
		any = true
		if len(v) == 1+shortRefLen && v[0] == tagAnswer {
			refs = append(refs, [shortRefLen]byte(v[1:]))
			return nil
		}
		return db.outputFieldNames(tx, st.Name, k, v, names)
	})
	if err != nil {
		return nil, err
	}
	if err := db.answersFieldNames(tx, st.Name, refs, w, names); err != nil {
		return nil, err
	}
	used, err := db.sharedFieldNames(tx, si, w, names)
	if err != nil {
		return nil, err
	}
	if !any && !used {
		return nil, nil
	}
	return names, nil
}
