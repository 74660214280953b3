package bench

import (
	"net/http"
	"sync"
	"time"
)

// callCounter is an http.RoundTripper that counts the requests in flight,
// so every strategy's concurrency is measured the same way, at the wire:
// a worker asleep in a backoff or queued in a limiter holds no request.
//
// It also delays each 429 answer by refusal before handing it over: the
// simulator refuses at once, but a real refusal still costs the network
// round trip, and without it a client that retries 429s at once (the first
// seed) would spin at loopback speed. The delay counts as time in flight.
type callCounter struct {
	base    http.RoundTripper
	refusal time.Duration

	mu          sync.Mutex
	inFlight    int
	first, last time.Time // first request sent, last answer received
	changed     time.Time
	area        float64 // ∫ in flight dt, call-seconds
}

func (c *callCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.add(1)
	defer c.add(-1)
	resp, err := c.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests && c.refusal > 0 {
		t := time.NewTimer(c.refusal)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			resp.Body.Close()
			return nil, req.Context().Err()
		}
	}
	return resp, err
}

func (c *callCounter) add(d int) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() {
		c.first, c.changed = now, now
	}
	c.area += float64(c.inFlight) * now.Sub(c.changed).Seconds()
	c.changed = now
	c.inFlight += d
	if d < 0 {
		c.last = now
	}
}

// load returns the requests in flight now.
func (c *callCounter) load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// mean returns the time-average of requests in flight between the first
// request and the last answer, and that span.
func (c *callCounter) mean() (float64, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	span := c.last.Sub(c.first)
	if span <= 0 {
		return 0, 0
	}
	return c.area / span.Seconds(), span
}
