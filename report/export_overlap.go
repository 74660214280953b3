package report

import "errors"

// overlapBatch is how many items the walk hands the row writer at once:
// a channel send per item would cost more than the row.
const overlapBatch = 256

// overlapDepth is how many batches may wait for the row writer, so the
// memory held is a few thousand items whatever the item count.
const overlapDepth = 4

// errStopped is what the walk of an overlapped source returns when the
// row writer has failed and wants no more items.
var errStopped = errors.New("export: the row writer stopped")

// overlapped is src read in a goroutine of its own while the caller's fn
// writes the rows: the store's decoding and the rows' formatting each
// took about half of an export's CPU, and run side by side they take
// two cores where one did both. The items come to fn in src's order. It
// needs a src whose items stay valid after its callback returns (the
// stores hand over copies). When fn fails the walk is stopped and
// waited for, so no goroutine outlives the call.
func overlapped(src FlatSource) FlatSource {
	return func(fn func(FlatItem) error) error {
		batches := make(chan []FlatItem, overlapDepth)
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			defer close(batches)
			batch := make([]FlatItem, 0, overlapBatch)
			send := func() error {
				select {
				case <-stop: // before a send that room in batches would let through
					return errStopped
				default:
				}
				select {
				case batches <- batch:
					batch = make([]FlatItem, 0, overlapBatch)
					return nil
				case <-stop:
					return errStopped
				}
			}
			err := src(func(it FlatItem) error {
				batch = append(batch, it)
				if len(batch) < overlapBatch {
					return nil
				}
				return send()
			})
			// The items before a failure of the walk go out too: their
			// rows are written, and one of them failing is the error, as
			// without the goroutine.
			if len(batch) > 0 && !errors.Is(err, errStopped) {
				if serr := send(); err == nil {
					err = serr
				}
			}
			done <- err
		}()
		var err error
	rows:
		for b := range batches {
			for _, it := range b {
				if err = fn(it); err != nil {
					// The walk sends at most overlapDepth batches more,
					// unread, then sees stop.
					close(stop)
					break rows
				}
			}
		}
		srcErr := <-done
		if err != nil {
			return err
		}
		return srcErr
	}
}
