package ingest

import (
	"slices"
	"strconv"

	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// maxFieldNames bounds the field names a Reader collects (Result.Fields):
// a JSONL file whose keys differ on every line would otherwise hold them
// all.
const maxFieldNames = 1000

// isJSONNumber says whether s is a JSON number,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?: what a CSV value must
// look like to make its column numeric. Leading zeros (a zip code, 007)
// and Go's extras (0x1p4, 1_000, Inf) keep a column text. Read with
// jsonscan, not a regular expression: it runs on every field of every
// line.
func isJSONNumber(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return false // jsonscan.Value would skip spaces and read other values
	}
	end, ok := jsonscan.Value([]byte(s), 0, 0)
	return ok && end == len(s)
}

// columnTypes learns, over the good records of one pass, which fields are
// named (Result.Fields) and which CSV columns hold only numbers.
type columnTypes struct {
	names     []string
	named     map[string]bool
	numeric   map[string]bool // a column with a number in it
	notNumber map[string]bool // a column with a non-number in it
}

func (c *columnTypes) add(rec *pipeline.Record) {
	if c.named == nil {
		c.named, c.numeric, c.notNumber = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	for k, v := range rec.Fields {
		if !c.named[k] && len(c.names) < maxFieldNames {
			c.named[k] = true
			c.names = append(c.names, k)
		}
		if isJSONNumber(v) {
			c.numeric[k] = true
		} else {
			c.notNumber[k] = true
		}
	}
}

// numberColumns is the columns that had numbers and nothing else.
func (c *columnTypes) numberColumns() []string {
	var out []string
	for k := range c.numeric {
		if !c.notNumber[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// fieldNames is the field names seen, sorted.
func (c *columnTypes) fieldNames() []string {
	return slices.Sorted(slices.Values(c.names))
}

// setTypes records rec's typed fields once its values are final (a date
// may have been rewritten): for CSV the columns a Plan found numeric;
// for JSONL the types parseJSON noted, kept where the text still reads
// as that type.
func (r *Reader) setTypes(rec *pipeline.Record) {
	if r.opt.Format != JSONL {
		for _, k := range r.opt.numberColumns {
			if v, ok := rec.Fields[k]; ok && isJSONNumber(v) {
				if rec.Types == nil {
					rec.Types = map[string]pipeline.FieldType{}
				}
				rec.Types[k] = pipeline.FieldNumber
			}
		}
		return
	}
	for k, t := range rec.Types {
		v := rec.Fields[k]
		_, bad := strconv.ParseBool(v)
		if (t == pipeline.FieldNumber && !isJSONNumber(v)) || (t == pipeline.FieldBool && bad != nil) {
			delete(rec.Types, k)
		}
	}
	if len(rec.Types) == 0 {
		rec.Types = nil
	}
}
