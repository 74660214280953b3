package limiter

import (
	"os"
	"strconv"
	"time"
)

// Throwaway knobs for #29's first-429 experiments; reverted in the next commit.
var (
	zzJump     = os.Getenv("ZZ_JUMP") != ""
	zzEarly    = os.Getenv("ZZ_EARLY") != ""
	zzLW       = os.Getenv("ZZ_LW") != ""
	zzTopShare = envFloat("ZZ_TOPSHARE", topShare)
	zzLag      = envFloat("ZZ_LAG", firstClimbRoundTrips)
)

func envFloat(k string, d float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(k), 64); err == nil {
		return v
	}
	return d
}

// zzJumpToTop moves the rate straight to the climb's target once slow
// start's top is read (knob ZZ_JUMP).
func (w *law) zzJumpToTop() {
	if !zzJump || w.slowTop <= 0 || w.bounded || !w.zzFewRefused(w.zzTopFrom) || zzLW && w.latency() < w.window || w.latency() < time.Duration(zzMinLat*float64(time.Second)) {
		return
	}
	w.rate = max(w.rate, min(w.slowTop*zzTopShare, w.maxRate()))
	w.fitLimit()
}

var zzFew = envFloat("ZZ_FEW", -1)

var zzMinLat = envFloat("ZZ_MINLAT", 0)

// zzFewRefused reports whether the calls started over the round trip
// before from were refused at most share zzFew (knob ZZ_FEW; true when unset).
func (w *law) zzFewRefused(from time.Time) bool {
	if zzFew < 0 {
		return true
	}
	lo := from.Add(-w.latency())
	var ok, ref float64
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := w.sent[(w.nSent-i)%sentRing]
		if c.at.Before(lo) {
			break
		}
		switch c.outcome {
		case admitted:
			ok += c.weight
		case refusedCall:
			ref += c.weight
		}
	}
	return ref <= zzFew*(ok+ref)
}
