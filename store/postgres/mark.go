package postgres

// This file keeps the item's text out of the outputs that repeat it.
// Sanitizing leaves 97-99% of texts as they were, and its output then
// carries the whole text again (174 of the 361 bytes of an item's
// outputs at a million items). Such an output is stored marked: a tag
// byte, the offset at which the text's JSON string stood (one of the
// output object's top-level values), and the output without it; every
// reader has the item's record and puts the text back, byte for byte as
// the stage gave it. The tag cannot begin a JSON value, so an output
// stored whole reads as before.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The tags of a marked output, each naming how the text was written as
// a JSON string: json.Marshal's way (<, > and & escaped), or an
// Encoder's with SetEscapeHTML(false).
const (
	markEscaped byte = 0x01
	markPlain   byte = 0x02
)

// marks reports whether outputs of stage si of stages may be stored
// marked: every reader of them also reads the item's record. The last
// stage's outputs (the facts the tally, the cube and their checks fold)
// and the classify stage's (whose confidences they read) are read
// without it, so they are stored whole.
func marks(stages []pipeline.StageDef, si int) bool {
	return si < len(stages)-1 && stages[si].Name != confStage
}

// quoteText is text as a JSON string in tag's way.
func quoteText(text string, tag byte) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(tag == markEscaped)
	_ = enc.Encode(text) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// markText is out stored marked when one of the top-level values of the
// JSON object out is text as a JSON string (the first that is), else out
// itself. unmark puts the same bytes back at the same offset, so the
// output reads back exactly; a value, not any match of the bytes (a key,
// a part of another value, the end of one string and the start of the
// next), so that outputShape has out's keys.
func markText(out []byte, text string) []byte {
	if len(out) == 0 || !storedWhole(out) {
		return out
	}
	esc := quoteText(text, markEscaped)
	for _, tag := range []byte{markEscaped, markPlain} {
		enc := esc
		if tag == markPlain {
			if enc = quoteText(text, markPlain); bytes.Equal(enc, esc) {
				break
			}
		}
		i := topValueAt(out, enc)
		if i < 0 {
			continue
		}
		m := make([]byte, 0, len(out)-len(enc)+1+binary.MaxVarintLen64)
		m = append(m, tag)
		m = binary.AppendUvarint(m, uint64(i))
		if len(m)+len(out)-len(enc) >= len(out) {
			return out // a text so short the marker saves nothing
		}
		return append(append(m, out[:i]...), out[i+len(enc):]...)
	}
	return out
}

// topValueAt is the offset of the first top-level value of the JSON
// object out whose bytes are enc, or -1 when out is not an object or
// none is (as far as out reads as JSON before one is found).
func topValueAt(out, enc []byte) int {
	i := jsonscan.SkipSpace(out, 0)
	if i >= len(out) || out[i] != '{' {
		return -1
	}
	for i = jsonscan.SkipSpace(out, i+1); i < len(out) && out[i] == '"'; i = jsonscan.SkipSpace(out, i+1) {
		end, ok := jsonscan.String(out, i)
		if !ok {
			return -1
		}
		if i = jsonscan.SkipSpace(out, end); i >= len(out) || out[i] != ':' {
			return -1
		}
		start := jsonscan.SkipSpace(out, i+1)
		if end, ok = jsonscan.Value(out, start, 1); !ok {
			return -1
		}
		if bytes.Equal(out[start:end], enc) {
			return start
		}
		if i = jsonscan.SkipSpace(out, end); i >= len(out) || out[i] != ',' {
			return -1
		}
	}
	return -1
}

// storedWhole reports whether the stored output data is the output
// itself (neither marked nor packed): a reader of it aliases data.
func storedWhole(data []byte) bool { return !isMarked(data) && !isPacked(data) }

// isMarked reports whether data is a marked output.
func isMarked(data []byte) bool {
	return len(data) > 0 && (data[0] == markEscaped || data[0] == markPlain)
}

var errBadMark = errors.New("marked output with its text's offset past its end")

// splitMark gives a marked output's tag, the output without the text,
// and where the text goes.
func splitMark(data []byte) (tag byte, rest []byte, at int, err error) {
	off, n := binary.Uvarint(data[1:])
	if n <= 0 || off > uint64(len(data)-1-n) {
		return 0, nil, 0, errBadMark
	}
	return data[0], data[1+n:], int(off), nil
}

// unmark is the output data stands for, for an item whose text is text:
// data itself when it is stored whole.
func unmark(data []byte, text string) ([]byte, error) {
	if isPacked(data) {
		return unpack(data, text)
	}
	if !isMarked(data) {
		return data, nil
	}
	tag, rest, at, err := splitMark(data)
	if err != nil {
		return nil, err
	}
	return slices.Concat(rest[:at], quoteText(text, tag), rest[at:]), nil
}

// outputShape is data with an empty string for the item's text: the
// output's keys and structure, for a reader without the record
// (FieldNames).
func outputShape(data []byte) ([]byte, error) {
	if isPacked(data) {
		return unpack(data, "")
	}
	if !isMarked(data) {
		return data, nil
	}
	_, rest, at, err := splitMark(data)
	if err != nil {
		return nil, err
	}
	return slices.Concat(rest[:at], []byte(`""`), rest[at:]), nil
}

// unmarkOutput is unmark as a read's error: the item and stage named.
func (db *DB) unmarkOutput(id string, si int, data []byte, text string) (json.RawMessage, error) {
	out, err := unmark(data, text)
	if err != nil {
		return nil, pipeline.Damaged(id, db.stages[si].Name, err, "its stored output is damaged")
	}
	return out, nil
}

// markIDs lists the items whose successes among ts may be stored
// marked: the commit reads their texts (itemTextsSQL).
func (db *DB) markIDs(ts []pipeline.Transition) []string {
	var ids []string
	for _, t := range ts {
		if t.Outcome == pipeline.Succeeded && marks(db.stages, db.index[t.Stage]) {
			ids = append(ids, t.ID)
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(ids)))
}

// itemTextsSQL reads the records of items $1, for collectTexts.
const itemTextsSQL = `SELECT item_id, record FROM item WHERE item_id = ANY($1)`

// collectTexts reads itemTextsSQL's rows into the items' texts.
func (db *DB) collectTexts(rows pgx.Rows) (map[string]string, error) {
	texts := map[string]string{}
	var id string
	var record []byte
	_, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
		var r pipeline.Record
		if err := db.readRecord(id, record, &r); err != nil {
			return recordDamage(id, err, "bad record")
		}
		texts[id] = r.Text
		return nil
	})
	return texts, err
}

// storedOutput is what a commit stores for item id's output out at
// stage si: marked when it may be and repeats the text.
func (db *DB) storedOutput(si int, id string, out []byte, texts map[string]string) []byte {
	text, ok := texts[id]
	return storedForm(db.stages, si, out, text, ok)
}

// storedForm is what is stored for output out at stage si of stages, of
// an item whose text is text (haveText false: not known): packed when it
// packs, else marked when it may be and repeats the text, else whole.
func storedForm(stages []pipeline.StageDef, si int, out []byte, text string, haveText bool) []byte {
	withText := haveText && marks(stages, si)
	if p := packOutput(out, text, withText); p != nil {
		return p
	}
	if withText {
		return markText(out, text)
	}
	return out
}

// backfillMarks stores marked every output a pipeline stored whole
// before schema 11 that repeats its item's text (at the stages marks
// allows).
func (db *DB) backfillMarks(ctx context.Context, tx pgx.Tx) error {
	stages, err := readDefinition(ctx, tx)
	if err != nil {
		return err
	}
	var at []int16
	for si := range stages {
		if marks(stages, si) {
			at = append(at, int16(si))
		}
	}
	if len(at) == 0 {
		return nil
	}
	err = rewriteOutputs(ctx, tx, `o.stage = ANY($4)`, []any{at}, func(o storedOutputRow) ([]byte, error) {
		if o.record == nil {
			return nil, nil // Check reports it; it stays as it is
		}
		var r pipeline.Record
		if err := db.readRecord(o.id, o.record, &r); err != nil {
			return nil, recordDamage(o.id, err, "bad record")
		}
		if m := markText(o.data, r.Text); len(m) != len(o.data) {
			return m, nil
		}
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("store outputs that repeat their text marked: %w", err)
	}
	return nil
}

// updateOutputsSQL replaces the data of outputs ($1 ids, $2 stages) with
// $3, in the rows by (item_id, stage) of the schemas before step 15 (the
// migrations' rewriteOutputs).
const updateOutputsSQL = `UPDATE output o SET data = k.data
	FROM unnest($1::text[], $2::smallint[], $3::bytea[]) AS k(id, stage, data)
	WHERE o.item_id = k.id AND o.stage = k.stage`
