package pipeline

import (
	"math"
	"time"
)

// Latency buckets are logarithmic: bucket i holds latencies up to
// latencyMin·latencyGamma^i, so a quantile read from them is within
// about 1% of the true one, over 100µs to days, in a fixed number of
// counters however many calls are seen (a night of flex calls keeps no
// samples).
const (
	latencyGamma   = 1.02
	latencyMin     = 100 * time.Microsecond
	latencyBuckets = 1100 // 100µs·1.02^1100 is about 80 hours
)

var latencyLogGamma = math.Log(latencyGamma)

// latencyIndex is d's bucket.
func latencyIndex(d time.Duration) int {
	if d <= latencyMin {
		return 0
	}
	i := int(math.Ceil(math.Log(float64(d)/float64(latencyMin)) / latencyLogGamma))
	return min(i, latencyBuckets-1)
}

// latencyValue is what bucket i stands for: the middle of its range,
// which keeps the relative error under (γ-1)/(γ+1) either side.
func latencyValue(i int) time.Duration {
	if i == 0 {
		return latencyMin
	}
	upper := float64(latencyMin) * math.Pow(latencyGamma, float64(i))
	return time.Duration(upper * 2 / (1 + latencyGamma))
}

// Latencies is a bounded-memory histogram of call latencies, from which
// quantiles are read (Quantile) and which adds up across runs (Add). Its
// JSON form is the non-empty buckets, by index. The zero value is empty
// and ready to use. Not safe for concurrent use.
type Latencies struct {
	// Buckets counts calls by bucket index (see latencyIndex).
	Buckets map[int]int64 `json:"buckets,omitempty"`
	// Count is the calls counted; Sum their latencies added up.
	Count int64         `json:"count,omitempty"`
	Sum   time.Duration `json:"sum_ns,omitempty"`
}

// Observe counts one call that took d.
func (l *Latencies) Observe(d time.Duration) {
	if l.Buckets == nil {
		l.Buckets = make(map[int]int64)
	}
	l.Buckets[latencyIndex(d)]++
	l.Count++
	l.Sum += d
}

// Add counts o's calls too.
func (l *Latencies) Add(o *Latencies) {
	if o == nil || o.Count == 0 {
		return
	}
	if l.Buckets == nil {
		l.Buckets = make(map[int]int64, len(o.Buckets))
	}
	for i, n := range o.Buckets {
		l.Buckets[i] += n
	}
	l.Count += o.Count
	l.Sum += o.Sum
}

// Quantile is the latency below which a share q (0..1) of the calls
// fell, within about 1%; 0 when no call was counted.
func (l *Latencies) Quantile(q float64) time.Duration {
	if l == nil || l.Count == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(l.Count)))
	rank = max(rank, 1)
	var seen int64
	for i := 0; i < latencyBuckets; i++ {
		if seen += l.Buckets[i]; seen >= rank {
			return latencyValue(i)
		}
	}
	return latencyValue(latencyBuckets - 1)
}
