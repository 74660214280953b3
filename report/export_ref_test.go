package report

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// The flat export as it was written before rows streamed each output's
// raw fields (decode each output into a map, marshal each value again):
// the reference TestWriteFlat_SameAsBefore holds WriteFlat to, byte for
// byte.

// WriteFlat writes one flat row per item of src: id, every input field as
// its own column (text included), each stage's output fields as their
// own columns, and numbers as people write them (0.83, not
// 0.8300000000000001). CSV and TSV have a header row; an absent value is
// an empty cell, a nested value its JSON, and a text value or column name
// that a spreadsheet would run as a formula starts with a single quote
// unless o.RawCells (numbers are never quoted: -3 stays a number). JSONL
// has one object per line
// with the same keys in the same order, absent values left out.
func refWriteFlat(w io.Writer, src FlatSource, o FlatOptions) error {
	switch o.Format {
	case FormatCSV, FormatTSV, FormatJSONL:
	default:
		return fmt.Errorf("export: unknown format %q (csv, tsv or jsonl)", o.Format)
	}
	names, err := flatNames(src, o)
	if err != nil {
		return err
	}
	all, versionCols := flatColumns(names, o)
	cols := all
	if len(o.Columns) > 0 {
		for _, c := range o.Columns {
			if !slices.Contains(all, c) {
				return &UnknownColumnError{Column: c, Columns: all}
			}
		}
		cols = o.Columns
	}
	text := formulaCell
	if o.RawCells {
		text = func(s string) string { return s }
	}
	// Rows go out in 64 KiB writes, not one write (a system call on a
	// terminal or pipe) per row.
	bw := bufio.NewWriterSize(w, 64<<10)
	var cw *csv.Writer
	var keys [][]byte // the JSON object keys, marshalled once
	if o.Format == FormatJSONL {
		for _, c := range cols {
			k, _ := json.Marshal(c)
			keys = append(keys, k)
		}
	} else {
		cw = csv.NewWriter(bw)
		if o.Format == FormatTSV {
			cw.Comma = '\t'
		}
		header := make([]string, len(cols))
		for i, c := range cols {
			header[i] = text(c)
		}
		if err := cw.Write(header); err != nil {
			return err
		}
	}
	err = src(func(it FlatItem) error {
		row, err := refFlatRow(it, o, versionCols)
		if err != nil {
			return err
		}
		if cw != nil {
			rec := make([]string, len(cols))
			for i, c := range cols {
				rec[i] = cellString(row[c])
				if _, isText := row[c].(string); isText {
					rec[i] = text(rec[i])
				}
			}
			return cw.Write(rec)
		}
		return refWriteJSONLine(bw, cols, keys, row)
	})
	if err != nil {
		return err
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// flatRow is one item's values by column.
func refFlatRow(it FlatItem, o FlatOptions, versionCols map[string]string) (map[string]any, error) {
	row := map[string]any{"id": it.Record.ID}
	if o.Stage == "" {
		row["status"] = it.Status
		if it.DeadReason != "" {
			row["dead_reason"] = it.DeadReason
		}
	}
	var stageFields []string
	var stageOut map[string]any
	if o.Stage != "" {
		var err error
		if stageOut, err = decodeOutput(it.Record.ID, o.Stage, it.Outputs[o.Stage]); err != nil {
			return nil, err
		}
		stageFields = sortedKeys(stageOut)
	}
	row[inputColumn("text", o, stageFields)] = it.Record.Text
	for k, v := range it.Record.Fields {
		row[fieldColumn(k, o, stageFields)] = v
	}
	if o.Stage != "" {
		for k, v := range stageOut {
			if k != "id" {
				row[k] = v
			}
		}
		return row, nil
	}
	for stage, raw := range it.Outputs {
		fields, err := decodeOutput(it.Record.ID, stage, raw)
		if err != nil {
			return nil, err
		}
		for k, v := range fields {
			row[stage+"."+k] = v
		}
		if col := versionCols[stage]; col != "" {
			row[col] = o.Versions[stage]
		}
	}
	return row, nil
}

// writeJSONLine writes row as one JSON object, keys in cols order
// (keys[i] is cols[i] marshalled).
func refWriteJSONLine(w io.Writer, cols []string, keys [][]byte, row map[string]any) error {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for i, c := range cols {
		v, ok := row[c]
		if !ok || v == nil {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k := keys[i]
		val, err := json.Marshal(cleanNumbers(v))
		if err != nil {
			return fmt.Errorf("export: item %v, column %s: %w", row["id"], c, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteString("}\n")
	_, err := w.Write(b.Bytes())
	return err
}
