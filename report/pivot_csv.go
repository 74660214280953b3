package report

import (
	"encoding/csv"
	"io"
	"math"
	"strconv"
)

// CSV writes the pivot (`report --by ... --format csv`) in long form, one
// row per row of the pivot and label, so a spreadsheet's own pivot table
// or a CSV reader takes it as it is: the group fields, then label, count,
// share (0..1), the row's items and average rating, the label's average
// rating, the period compared with, its items, and the changes. Numbers
// are written as people write them (0.35, not 0.35000000000000003); an
// empty cell means no value (no rating, no previous period). A text cell
// (a group value, a label, a field name) that a spreadsheet would run as
// a formula starts with a single quote (see formulaCell); RawCSV writes
// every cell as it is.
func CSV(w io.Writer, d *Data) error { return pivotCSV(w, d, formulaCell) }

// RawCSV is CSV with every text cell exactly as the data holds it, for a
// program rather than a spreadsheet (`report --csv-raw`).
func RawCSV(w io.Writer, d *Data) error {
	return pivotCSV(w, d, func(s string) string { return s })
}

// pivotCSV writes the pivot, each text cell through text; number cells
// are ours and never start a formula.
func pivotCSV(w io.Writer, d *Data, text func(string) string) error {
	p := d.Pivot
	if p == nil {
		return ErrNoPivot
	}
	cw := csv.NewWriter(w)
	var header []string
	for _, f := range p.By {
		header = append(header, text(f))
	}
	header = append(header, "label", "count", "share", "row_items", "row_avg_rating", "label_avg_rating",
		"previous", "previous_items", "change", "change_pts")
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range p.Rows {
		for _, c := range r.Cells {
			var row []string
			for _, v := range r.Key {
				row = append(row, text(v))
			}
			row = append(row, text(c.Label), strconv.FormatInt(c.Count, 10), FormatNumber(roundTo(c.Share, 6)),
				strconv.FormatInt(r.Items, 10), optNumber(r.Rating, 4), optNumber(c.Rating, 4), text(r.Previous))
			if r.Previous != "" {
				row = append(row, strconv.FormatInt(r.PreviousItems, 10))
			} else {
				row = append(row, "")
			}
			row = append(row, optInt(c.Change), optNumber(c.ChangePts, 1))
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// roundTo rounds x to a number of decimals, half away from zero.
func roundTo(x float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(x*p) / p
}

func optNumber(x *float64, decimals int) string {
	if x == nil {
		return ""
	}
	return FormatNumber(roundTo(*x, decimals))
}

func optInt(n *int64) string {
	if n == nil {
		return ""
	}
	return strconv.FormatInt(*n, 10)
}
