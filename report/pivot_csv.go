package report

import (
	"encoding/csv"
	"errors"
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
// empty cell means no value (no rating, no previous period).
func CSV(w io.Writer, d *Data) error {
	p := d.Pivot
	if p == nil {
		return errors.New("report --format csv writes the pivot: add --by, e.g. --by app,month")
	}
	cw := csv.NewWriter(w)
	header := append(append([]string(nil), p.By...), "label", "count", "share", "row_items", "row_avg_rating", "label_avg_rating",
		"previous", "previous_items", "change", "change_pts")
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range p.Rows {
		for _, c := range r.Cells {
			row := append([]string(nil), r.Key...)
			row = append(row, c.Label, strconv.FormatInt(c.Count, 10), FormatNumber(roundTo(c.Share, 6)),
				strconv.FormatInt(r.Items, 10), optNumber(r.Rating, 4), optNumber(c.Rating, 4), r.Previous)
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
