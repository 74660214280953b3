package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonquote"
	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
)

// The row pass of a flat export. A row is written from each output's raw
// JSON: its top-level fields are found by scanning, and a value goes out
// as the bytes it already is whenever decoding it and marshalling it
// again (what the export did before, see export_ref_test.go) would give
// those same bytes: a string without escapes or characters encoding/json
// escapes, true and false. A number goes through numberText; anything
// else (a nested value, a string with escapes) is decoded and marshalled
// as before. A field that is null is absent, as before.

// cell is one column's value in the row being written.
type cell struct {
	set bool
	// text is a Go string value (id, status, an input field) when raw is nil.
	text string
	// raw is a JSON value from an output, as stored.
	raw []byte
	// plain is true when raw is known to be a string plainJSONString
	// accepts (the scan that found its end found that too); false is
	// not known, and appendJSONValue checks.
	plain bool
}

// rowWriter lays out rows over fixed columns; it is reused row after row.
type rowWriter struct {
	o     FlatOptions
	cols  []string
	slots map[string]int // column name -> slot in cells
	colAt []int          // cols[i]'s slot
	cells []cell
	// stageSlots are the slots of "STAGE.KEY" columns by stage and key
	// (o.Stage == ""), so a row looks them up without building names.
	stageSlots  map[string]map[string]int
	versionSlot map[string]int
	// inputSlots caches an input field's slot by field name (o.Stage ==
	// "": the column an input field goes to does not vary by row).
	inputSlots map[string]int
	// comma separates CSV (TSV) cells; formulas says whether a text cell
	// a spreadsheet would run gets formulaCell's quote (not RawCells).
	comma    byte
	formulas bool
	keys     [][]byte // the JSONL keys, marshalled once
	line     []byte
	unquoted []byte // a CSV cell's string with its escapes read
	fields   []rawField
}

// rawField is a top-level field of an output object.
type rawField struct {
	key   []byte // unescaped
	val   []byte
	plain bool // val is a string plainJSONString accepts
}

func newRowWriter(o FlatOptions, cols []string, versionCols map[string]string) *rowWriter {
	w := &rowWriter{o: o, cols: cols, slots: map[string]int{}, inputSlots: map[string]int{}, comma: ',', formulas: !o.RawCells}
	if o.Format == FormatTSV {
		w.comma = '\t'
	}
	slot := func(name string) int {
		s, ok := w.slots[name]
		if !ok {
			s = len(w.slots)
			w.slots[name] = s
		}
		return s
	}
	for _, c := range cols {
		w.colAt = append(w.colAt, slot(c))
	}
	w.cells = make([]cell, len(w.slots))
	if o.Stage == "" {
		w.stageSlots = map[string]map[string]int{}
		w.versionSlot = map[string]int{}
		for s, c := range versionCols {
			if i, ok := w.slots[c]; ok {
				w.versionSlot[s] = i
			}
		}
	}
	for _, c := range cols {
		k, _ := json.Marshal(c)
		w.keys = append(w.keys, k)
	}
	return w
}

// put sets the column named name, when it is one of the columns.
func (w *rowWriter) put(name string, c cell) {
	if i, ok := w.slots[name]; ok {
		w.cells[i] = c
	}
}

// fill sets the cells of one item's row.
func (w *rowWriter) fill(it FlatItem) error {
	clear(w.cells)
	id := it.Record.ID
	w.put("id", cell{set: true, text: id})
	if w.o.Stage != "" {
		return w.fillStage(it)
	}
	w.put("status", cell{set: true, text: it.Status})
	if it.DeadReason != "" {
		w.put("dead_reason", cell{set: true, text: it.DeadReason})
	}
	w.put(inputColumn("text", w.o, nil), cell{set: true, text: it.Record.Text})
	for k, v := range it.Record.Fields {
		i, ok := w.inputSlots[k]
		if !ok {
			i = -1
			if s, found := w.slots[fieldColumn(k, w.o, nil)]; found {
				i = s
			}
			w.inputSlots[k] = i
		}
		if i >= 0 {
			w.cells[i] = cell{set: true, text: v}
		}
	}
	for stage, raw := range it.Outputs {
		fields, err := w.outputFields(id, stage, raw)
		if err != nil {
			return err
		}
		slots := w.stageSlots[stage]
		if slots == nil {
			slots = map[string]int{}
			w.stageSlots[stage] = slots
		}
		for _, f := range fields {
			i, ok := slots[string(f.key)]
			if !ok {
				i = -1
				if s, found := w.slots[stage+"."+string(f.key)]; found {
					i = s
				}
				slots[string(f.key)] = i
			}
			if i >= 0 {
				w.cells[i] = cell{set: true, raw: f.val, plain: f.plain}
			}
		}
		if i, ok := w.versionSlot[stage]; ok {
			w.cells[i] = cell{set: true, text: w.o.Versions[stage]}
		}
	}
	return nil
}

// fillStage sets the cells of an `export --stage` row, whose input
// columns depend on the row's own output fields.
func (w *rowWriter) fillStage(it FlatItem) error {
	fields, err := w.outputFields(it.Record.ID, w.o.Stage, it.Outputs[w.o.Stage])
	if err != nil {
		return err
	}
	var stageFields []string
	for _, f := range fields {
		stageFields = append(stageFields, string(f.key))
	}
	w.put(inputColumn("text", w.o, stageFields), cell{set: true, text: it.Record.Text})
	for k, v := range it.Record.Fields {
		w.put(fieldColumn(k, w.o, stageFields), cell{set: true, text: v})
	}
	for _, f := range fields {
		if string(f.key) != "id" {
			w.put(string(f.key), cell{set: true, raw: f.val, plain: f.plain})
		}
	}
	return nil
}

// outputFields are the top-level fields of a stage output, in order (a
// repeated key appears twice, the later winning as it does in a map).
// An output that is not plainly a JSON object takes decodeOutput's way,
// so it gives the same error, or the same fields, as before.
func (w *rowWriter) outputFields(id, stage string, raw []byte) ([]rawField, error) {
	w.fields = w.fields[:0]
	if len(raw) == 0 {
		return nil, nil
	}
	if fields, ok := appendRawFields(w.fields, raw); ok {
		w.fields = fields
		return fields, nil
	}
	m, err := decodeOutput(id, stage, raw)
	if err != nil {
		return nil, err
	}
	for k, v := range m {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		w.fields = append(w.fields, rawField{key: []byte(k), val: b})
	}
	return w.fields, nil
}

// appendRawFields appends the fields of raw to fields; false when raw
// is not a valid JSON object (as json.Valid reads JSON) or has a key
// with escapes, which the caller leaves to the decoder.
func appendRawFields(fields []rawField, raw []byte) ([]rawField, bool) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return fields, false
	}
	if i = jsonscan.SkipSpace(raw, i+1); i < len(raw) && raw[i] == '}' {
		return fields, jsonscan.SkipSpace(raw, i+1) == len(raw)
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return fields, false
		}
		end, ok := jsonscan.String(raw, i)
		k := raw[i+1 : max(end-1, i+1)]
		if !ok || bytes.IndexByte(k, '\\') >= 0 || !utf8.Valid(k) {
			return fields, false
		}
		if i = jsonscan.SkipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return fields, false
		}
		start := jsonscan.SkipSpace(raw, i+1)
		stop, plain := plainStringEnd(raw, start)
		if !plain {
			if stop, ok = jsonscan.Value(raw, start, 0); !ok {
				return fields, false
			}
		}
		fields = append(fields, rawField{key: k, val: raw[start:stop], plain: plain})
		if i = jsonscan.SkipSpace(raw, stop); i >= len(raw) {
			return fields, false
		}
		switch raw[i] {
		case ',':
			i = jsonscan.SkipSpace(raw, i+1)
		case '}':
			return fields, jsonscan.SkipSpace(raw, i+1) == len(raw)
		default:
			return fields, false
		}
	}
}

// writeJSONL appends the row as one JSON object, keys in column order.
func (w *rowWriter) writeJSONL(id string) ([]byte, error) {
	b := append(w.line[:0], '{')
	first := true
	for i, s := range w.colAt {
		c := w.cells[s]
		if !c.set {
			continue
		}
		start := len(b)
		if !first {
			b = append(b, ',')
		}
		b = append(b, w.keys[i]...)
		b = append(b, ':')
		var ok bool
		var err error
		if b, ok, err = appendJSONValue(b, c); err != nil {
			return nil, fmt.Errorf("export: item %v, column %s: %w", id, w.cols[i], err)
		}
		if !ok { // null: absent
			b = b[:start]
			continue
		}
		first = false
	}
	b = append(b, "}\n"...)
	w.line = b
	return b, nil
}

// appendJSONValue appends c as the export writes it: what decoding its
// value and marshalling it again (numbers through numberText) gives.
// ok is false for a null, which the row leaves out.
func appendJSONValue(b []byte, c cell) ([]byte, bool, error) {
	if c.raw == nil {
		return jsonquote.Append(b, c.text), true, nil
	}
	raw := c.raw
	switch raw[0] {
	case 'n':
		return b, false, nil
	case 't', 'f':
		return append(b, raw...), true, nil
	case '"':
		if c.plain || plainJSONString(raw) {
			return append(b, raw...), true, nil
		}
	case '{', '[':
		if canonicalJSON(raw) {
			return append(b, raw...), true, nil
		}
		if b, ok := appendCanonical(b, raw); ok {
			return b, true, nil
		}
	default:
		if canonicalNumber(raw) {
			return append(b, raw...), true, nil
		}
		if raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9' {
			return append(b, numberText(json.Number(raw))...), true, nil
		}
	}
	v, err := decodeValue(raw)
	if err != nil {
		return b, false, err
	}
	if v == nil {
		return b, false, nil
	}
	m, err := json.Marshal(cleanNumbers(v))
	if err != nil {
		return b, false, err
	}
	return append(b, m...), true, nil
}

// flatCellText is c as a CSV cell, and whether it is a text value (which a
// spreadsheet might run as a formula).
func flatCellText(c cell) (string, bool, error) {
	if !c.set {
		return "", false, nil
	}
	if c.raw == nil {
		return c.text, true, nil
	}
	raw := c.raw
	switch raw[0] {
	case 'n':
		return "", false, nil
	case 't':
		return "true", false, nil
	case 'f':
		return "false", false, nil
	case '"':
		if unquotable(raw) {
			return unquotePlain(raw), true, nil
		}
	case '{', '[':
		if canonicalJSON(raw) {
			return string(raw), false, nil
		}
		if b, ok := appendCanonical(nil, raw); ok {
			return string(b), false, nil
		}
	default:
		if canonicalNumber(raw) {
			return string(raw), false, nil
		}
		if raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9' {
			return numberText(json.Number(raw)), false, nil
		}
	}
	v, err := decodeValue(raw)
	if err != nil {
		return "", false, err
	}
	_, isText := v.(string)
	return cellString(v), isText, nil
}

// decodeValue reads one JSON value, numbers kept as written.
func decodeValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
