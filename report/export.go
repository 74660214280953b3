package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Export formats.
const (
	FormatCSV   = "csv"
	FormatTSV   = "tsv"
	FormatJSONL = "jsonl"
)

// FlatItem is one item as an export row sees it: its record, where it
// stands, and the outputs of the stages it has passed.
type FlatItem struct {
	Record pipeline.Record
	// Status is where the item stands: "done", "queued at STAGE", "in
	// batch at STAGE", "dead at STAGE", or "skipped at STAGE" for a done
	// item a stage's condition left out (see ItemStatus).
	Status string
	// DeadReason is the dead letter's class and message, "" when not dead.
	DeadReason string
	// Outputs are stage outputs (JSON objects) by stage name.
	Outputs map[string]json.RawMessage
}

// FlatSource calls fn once per item, in a stable order. WriteFlat calls
// it twice: once to learn the columns, once to write the rows, so memory
// holds the column names, never the items.
type FlatSource func(fn func(FlatItem) error) error

// FlatOptions shape the rows.
type FlatOptions struct {
	// Format is FormatCSV, FormatTSV or FormatJSONL.
	Format string
	// Stage, when set, gives today's `export --stage S` shape: id, the
	// input columns, and S's output fields under their own names (an input
	// field of the same name becomes "input.NAME"). When empty, every
	// stage's fields are columns named "stage.field" (classify.label),
	// after id, status, dead_reason and the input columns.
	Stage string
	// Stages is the pipeline's stage names in order (the column order).
	Stages []string
	// Columns, when set, are the columns to write, in this order; each
	// must be one the rows have.
	Columns []string
	// Versions are the stage fingerprints (the prompt and configuration
	// version) by stage name: each row with a stage's output gets its
	// stage's in a column "STAGE.version" ("STAGE._version" when the
	// stage has an output field named version). Not with Stage.
	Versions map[string]string
	// RawCells writes CSV and TSV text cells exactly as stored. By
	// default a text cell (and a column name) a spreadsheet would run as
	// a formula starts with a single quote (see formulaCell); JSONL is
	// always exact.
	RawCells bool
}

// WriteFlat writes one flat row per item of src: id, every input field as
// its own column (text included), each stage's output fields as their
// own columns, and numbers as people write them (0.83, not
// 0.8300000000000001). CSV and TSV have a header row; an absent value is
// an empty cell, a nested value its JSON, and a text value or column name
// that a spreadsheet would run as a formula starts with a single quote
// unless o.RawCells (numbers are never quoted: -3 stays a number). JSONL
// has one object per line
// with the same keys in the same order, absent values left out.
func WriteFlat(w io.Writer, src FlatSource, o FlatOptions) error {
	return writeFlat(w, src, o, func() (fieldNames, error) { return flatNames(src, o) })
}

// fieldNames are the names of the input fields and of each stage's
// output fields that the rows have.
type fieldNames struct {
	inputs  map[string]bool
	outputs map[string]map[string]bool
}

// writeFlat is WriteFlat with the names the columns come from read by
// names.
func writeFlat(w io.Writer, src FlatSource, o FlatOptions, names func() (fieldNames, error)) error {
	switch o.Format {
	case FormatCSV, FormatTSV, FormatJSONL:
	default:
		return fmt.Errorf("export: unknown format %q (csv, tsv or jsonl)", o.Format)
	}
	n, err := names()
	if err != nil {
		return err
	}
	all, versionCols := flatColumns(n, o)
	cols := all
	if len(o.Columns) > 0 {
		for _, c := range o.Columns {
			if !slices.Contains(all, c) {
				return &UnknownColumnError{Column: c, Columns: all}
			}
		}
		cols = o.Columns
	}
	// Rows go out in 64 KiB writes, not one write (a system call on a
	// terminal or pipe) per row.
	bw := bufio.NewWriterSize(w, 64<<10)
	rw := newRowWriter(o, cols, versionCols)
	if o.Format != FormatJSONL {
		var header []byte
		for i, c := range cols {
			if i > 0 {
				header = append(header, rw.comma)
			}
			header = appendCSVText(header, c, rw.comma, rw.formulas)
		}
		if _, err := bw.Write(append(header, '\n')); err != nil {
			return err
		}
	}
	err = src(func(it FlatItem) error {
		if err := rw.fill(it); err != nil {
			return err
		}
		var line []byte
		var err error
		if o.Format != FormatJSONL {
			if line, err = rw.appendCSVRow(rw.line[:0]); err != nil {
				return fmt.Errorf("item %q: %w", it.Record.ID, err)
			}
			rw.line = line
		} else if line, err = rw.writeJSONL(it.Record.ID); err != nil {
			return err
		}
		_, err = bw.Write(line)
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// flatNames reads src once for the names of the input and output fields.
func flatNames(src FlatSource, o FlatOptions) (fieldNames, error) {
	n := fieldNames{inputs: map[string]bool{}, outputs: map[string]map[string]bool{}}
	err := src(func(it FlatItem) error {
		for k := range it.Record.Fields {
			n.inputs[k] = true
		}
		for stage, raw := range it.Outputs {
			if o.Stage != "" && stage != o.Stage {
				continue
			}
			if n.outputs[stage] == nil {
				n.outputs[stage] = map[string]bool{}
			}
			if err := outputKeys(it.Record.ID, stage, raw, n.outputs[stage]); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// flatColumns are the column names: the fixed ones, the input fields
// sorted, then each stage's output fields sorted and its version column;
// versionCols names each stage's version column.
func flatColumns(n fieldNames, o FlatOptions) (cols []string, versionCols map[string]string) {
	inputs := n.inputs
	outputs := maps.Clone(n.outputs)
	cols = []string{"id"}
	if o.Stage == "" {
		cols = append(cols, "status", "dead_reason")
	}
	stageFields := sortedKeys(outputs[o.Stage])
	cols = append(cols, inputColumn("text", o, stageFields))
	for _, k := range sortedKeys(inputs) {
		cols = append(cols, fieldColumn(k, o, stageFields))
	}
	if o.Stage != "" {
		for _, k := range stageFields {
			if k != "id" {
				cols = append(cols, k)
			}
		}
		return cols, nil
	}
	versionCols = map[string]string{}
	for _, s := range append(slices.Clone(o.Stages), sortedKeys(outputs)...) {
		if outputs[s] == nil {
			continue
		}
		for _, k := range sortedKeys(outputs[s]) {
			cols = append(cols, s+"."+k)
		}
		if o.Versions[s] != "" {
			name := s + ".version"
			if outputs[s]["version"] {
				name = s + "._version"
			}
			versionCols[s] = name
			cols = append(cols, name)
		}
		delete(outputs, s)
	}
	return cols, versionCols
}

// inputColumn names an input field's column: its own name, or
// "input.NAME" when it would collide with a column of the export.
func inputColumn(k string, o FlatOptions, stageFields []string) string {
	if k == "id" || (o.Stage == "" && (k == "status" || k == "dead_reason")) || (o.Stage != "" && slices.Contains(stageFields, k)) {
		return "input." + k
	}
	return k
}

// fieldColumn names an input field's column; a field named "text" is not
// the item's text column.
func fieldColumn(k string, o FlatOptions, stageFields []string) string {
	if k == "text" {
		return "input.text"
	}
	return inputColumn(k, o, stageFields)
}

// decodeOutput reads a stage output, numbers kept as written.
func decodeOutput(id, stage string, raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return nil, &RecordError{What: fmt.Sprintf("export: item %q: the output of %s is not a JSON object", id, stage), Err: err}
	}
	return fields, nil
}

// numberText formats a JSON number as people write it.
func numberText(n json.Number) string {
	if !strings.ContainsAny(string(n), ".eE") { // else ParseInt fails anyway
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return strconv.FormatInt(i, 10)
		}
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return string(n)
	}
	return FormatNumber(f)
}

// cellString is a value as a CSV cell.
func cellString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return numberText(x)
	case bool:
		return strconv.FormatBool(x)
	default:
		b, err := json.Marshal(cleanNumbers(x))
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
}

// cleanNumbers rewrites the numbers inside a nested value as people write
// them, so JSON cells carry no float noise either.
func cleanNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return json.Number(numberText(x))
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cleanNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cleanNumbers(e)
		}
		return out
	}
	return v
}

// ExportOptions choose what Export writes.
type ExportOptions struct {
	// Stage, when set, exports the items with an output at that stage
	// (see FlatOptions.Stage); when empty, every item, wherever it is.
	Stage string
	// Format is FormatCSV, FormatTSV or FormatJSONL.
	Format string
	// Columns, when set, are the columns to write, in order.
	Columns []string
	// RawCells writes CSV and TSV text cells exactly as stored (see
	// FlatOptions.RawCells).
	RawCells bool
}

// ItemStatus says where an item stands, for the status column: "done",
// "queued at STAGE", "in batch at STAGE" or "dead at STAGE"; a done item
// that a stage's condition left out is "skipped at STAGE" (stages joined
// with ", "), and any other such item has "(skipped at STAGE)" appended.
func ItemStatus(it pipeline.ItemState, stages []string) string {
	var status string
	switch it.Status {
	case pipeline.StatusDone:
		status = "done"
	case pipeline.StatusQueued:
		status = "queued at " + it.Stage
	case pipeline.StatusInBatch:
		status = "in batch at " + it.Stage
	case pipeline.StatusDead:
		status = "dead at " + it.Stage
	default:
		status = it.Status.String() + " at " + it.Stage
	}
	var skipped []string
	for _, s := range stages {
		if isSkipped(it.Outputs[s]) {
			skipped = append(skipped, s)
		}
	}
	switch {
	case len(skipped) == 0:
		return status
	case it.Status == pipeline.StatusDone:
		return "skipped at " + strings.Join(skipped, ", ")
	default:
		return status + " (skipped at " + strings.Join(skipped, ", ") + ")"
	}
}

// isSkipped says whether a stage output is the record of a stage's
// condition leaving the item out ({"skipped": true, ...}).
func isSkipped(out json.RawMessage) bool {
	if len(out) == 0 || !bytes.Contains(out, []byte("skipped")) {
		return false
	}
	var o struct {
		Skipped bool `json:"skipped"`
	}
	return json.Unmarshal(out, &o) == nil && o.Skipped
}

// Export streams flat rows from db (see WriteFlat): with a stage, the
// items that have its output, in id order; without, every item in id
// order with where it stands (ItemStatus), its dead letter's reason, and
// for each stage output the stage's fingerprint as the database records
// it (the configuration of the last run the database accepted). A store
// that cannot walk every item (PostgreSQL) gives the done items, then the
// dead letters stage by stage; its queued items are not exported. On a
// store that names its fields (FieldNames: those of the items it
// exports; StageFieldNames for a stage's) the export reads the items
// once: the columns come from those names.
func Export(w io.Writer, db pipeline.Database, o ExportOptions) error {
	var names []string
	for _, s := range db.Stages() {
		names = append(names, s.Name)
	}
	if o.Stage != "" && !slices.Contains(names, o.Stage) {
		return fmt.Errorf("export: unknown stage %q (stages: %s)", o.Stage, strings.Join(names, ", "))
	}
	if o.Stage != "" {
		// Both stores hand ForEachOutput's callback copies.
		src := overlapped(func(fn func(FlatItem) error) error {
			return db.ForEachOutput(o.Stage, func(rec pipeline.Record, out json.RawMessage) error {
				return fn(FlatItem{Record: rec, Status: "done", Outputs: map[string]json.RawMessage{o.Stage: out}})
			})
		})
		fo := FlatOptions{Format: o.Format, Stage: o.Stage, Stages: names, Columns: o.Columns, RawCells: o.RawCells}
		lister, ok := db.(stageFieldLister)
		if !ok {
			return WriteFlat(w, src, fo)
		}
		return writeFlat(w, src, fo, func() (fieldNames, error) {
			inputs, outputs, err := lister.StageFieldNames(o.Stage)
			return fieldNames{inputs: inputs, outputs: map[string]map[string]bool{o.Stage: outputs}}, storedNamesError(err)
		})
	}
	defs, err := db.StoredDefinition()
	if err != nil {
		return &RecordError{What: "export: read the recorded pipeline definition", Err: err}
	}
	versions := map[string]string{}
	for _, d := range defs {
		versions[d.Name] = d.Fingerprint
	}
	src := doneThenDead(db, names)
	if all, ok := db.(itemWalker); ok {
		src = overlapped(func(fn func(FlatItem) error) error {
			return all.ForEachItem(func(is pipeline.ItemState) error {
				it := FlatItem{Record: is.Record, Status: ItemStatus(is, names), Outputs: is.Outputs}
				if is.Dead != nil {
					it.DeadReason = fmt.Sprintf("%s: %s", is.Dead.Class, is.Dead.Message)
				}
				return fn(it)
			})
		})
	}
	fo := FlatOptions{Format: o.Format, Stages: names, Columns: o.Columns, Versions: versions, RawCells: o.RawCells}
	lister, ok := db.(fieldLister)
	if !ok {
		return WriteFlat(w, src, fo)
	}
	return writeFlat(w, src, fo, func() (fieldNames, error) {
		inputs, outputs, err := lister.FieldNames()
		return fieldNames{inputs: inputs, outputs: outputs}, storedNamesError(err)
	})
}

// storedNamesError is the error of a store's reading of the field names
// as the export's own first pass would have worded it: an output that
// is not a JSON object is named as decodeOutput names it.
func storedNamesError(err error) error {
	var bad interface {
		NotObject() (id, stage string, raw []byte)
	}
	if errors.As(err, &bad) {
		id, stage, raw := bad.NotObject()
		if _, derr := decodeOutput(id, stage, raw); derr != nil {
			return derr
		}
	}
	return err
}

// itemWalker is a store that can walk every item's state (bbolt).
type itemWalker interface {
	ForEachItem(fn func(pipeline.ItemState) error) error
}

// fieldLister is a store that can name every input and output field of
// the items Export writes at less cost than reading them (bbolt,
// PostgreSQL): the columns of an export of every item come from it
// instead of a first pass over the rows.
type fieldLister interface {
	FieldNames() (inputs map[string]bool, outputs map[string]map[string]bool, err error)
}

// stageFieldLister is a store that names the input and output fields of
// the items an export of one stage writes at less cost than reading them
// (bbolt): the columns come from it instead of a first pass over the
// rows.
type stageFieldLister interface {
	StageFieldNames(stage string) (inputs, outputs map[string]bool, err error)
}

// deadLocator is a store that reads a stage's dead letters with what
// Locate gives of their items (record, outputs, letter) many at a time
// (PostgreSQL), where a Locate per letter costs a few statements each.
type deadLocator interface {
	ForEachDeadLocation(stage string, fn func(pipeline.Location) error) error
}

// forEachDeadLocation calls fn with the location of every item dead at
// stage, in id order: from the store's deadLocator, else by a Locate
// per letter.
func forEachDeadLocation(db pipeline.Database, stage string, fn func(pipeline.Location) error) error {
	if dl, ok := db.(deadLocator); ok {
		return dl.ForEachDeadLocation(stage, fn)
	}
	var ids []string
	// Locate opens its own transaction: collect the stage's dead ids
	// first rather than nest.
	err := db.ForEachDead(stage, func(e pipeline.DeadEntry) error {
		ids = append(ids, e.ID)
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		loc, err := db.Locate(id)
		if err != nil {
			return err
		}
		if err := fn(loc); err != nil {
			return err
		}
	}
	return nil
}

// doneThenDead lists the done items, then the dead letters stage by stage,
// for a store without itemWalker.
func doneThenDead(db pipeline.Database, names []string) FlatSource {
	return func(fn func(FlatItem) error) error {
		err := db.ForEachDone(func(it pipeline.Item) error {
			return fn(FlatItem{Record: it.Record, Status: "done", Outputs: it.Outputs})
		})
		if err != nil {
			return err
		}
		for _, s := range names {
			err := forEachDeadLocation(db, s, func(loc pipeline.Location) error {
				it := FlatItem{Record: loc.Record, Status: "dead at " + s, Outputs: loc.Output}
				if loc.Dead != nil {
					it.DeadReason = fmt.Sprintf("%s: %s", loc.Dead.Class, loc.Dead.Message)
				}
				return fn(it)
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
}
