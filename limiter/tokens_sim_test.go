package limiter

import (
	"math"
	"math/rand/v2"
	"time"
)

// itemTokens returns the input tokens of each of the shape's items, the
// same for the perfect client and the law's run of one seed.
func itemTokens(sh quotaShape, seed uint64) []int {
	out := make([]int, sh.items)
	rng := rand.New(rand.NewPCG(seed, 11))
	for i := range out {
		out[i] = simTokens
		if sh.tokens != nil {
			out[i] = sh.tokens(rng)
		}
	}
	return out
}

// promptSize is what a client sees of a call's size before it is
// billed: its prompt's runes, about four per token but not exactly (a
// client does not know the server's tokenizer).
func promptSize(tokens int) int64 { return int64(4*tokens - tokens%3) }

// tokenLog is a sliding log counting requests and input tokens: it
// admits a call while the window holds fewer than rpm calls and its
// tokens fit under tpm with theirs. With countRefused a refused call is
// charged too, as some quota systems do (a client that keeps knocking
// keeps the door shut), before its wait is computed.
type tokenLog struct {
	rpm, tpm     int
	window       time.Duration
	countRefused bool
	log          []tokenEntry // charged within the last window, oldest first
}

type tokenEntry struct {
	at     time.Time
	tokens int
}

func (q *tokenLog) trim(t time.Time) {
	i := 0
	for i < len(q.log) && !q.log[i].at.Add(q.window).After(t) {
		i++
	}
	q.log = q.log[i:]
}

// wait is the time from t until a call of tokens fits.
func (q *tokenLog) wait(t time.Time, tokens int) time.Duration {
	q.trim(t)
	var d time.Duration
	if c := len(q.log); c >= q.rpm {
		d = q.log[c-q.rpm].at.Add(q.window).Sub(t)
	}
	sum := 0
	for _, e := range q.log {
		sum += e.tokens
	}
	if excess := sum + tokens - q.tpm; excess > 0 {
		acc := 0
		for _, e := range q.log {
			acc += e.tokens
			if acc >= excess {
				d = max(d, e.at.Add(q.window).Sub(t))
				break
			}
		}
	}
	return d
}

func (q *tokenLog) admit(t time.Time, tokens int) (bool, time.Duration) {
	if q.wait(t, tokens) > 0 {
		if q.countRefused {
			q.log = append(q.log, tokenEntry{t, tokens})
		}
		return false, q.wait(t, tokens)
	}
	q.log = append(q.log, tokenEntry{t, tokens})
	return true, 0
}

func (q *tokenLog) next(t time.Time, tokens int) time.Time {
	for {
		d := q.wait(t, tokens)
		if d <= 0 {
			return t
		}
		t = t.Add(d)
	}
}

// reviewTokens draws a prompt's input tokens as reviews vary: log-normal
// around a mean of simTokens with a coefficient of variation of 0.6
// (the matrix's reviews with the system instruction: about 0.64), at
// least a tenth of the mean.
func reviewTokens(rng *rand.Rand) int {
	const cv = 0.6
	sigma := math.Sqrt(math.Log(1 + cv*cv))
	n := simTokens * math.Exp(sigma*rng.NormFloat64()-sigma*sigma/2)
	return max(int(math.Round(n)), simTokens/10)
}

// tpmCountedShape is the matrix's tpm-counted shape (bench.Shapes): a
// 1 s sliding log whose token budget binds at 170 mean prompts per
// window (300 requests are allowed too), refused calls charged, each 429
// naming the token budget.
func tpmCountedShape(items int, refusal time.Duration) quotaShape {
	const perWindow = 170 * simTokens
	return quotaShape{
		name: "tpm-counted", items: items, refusal: refusal, retry: retryExact,
		quota: func() quotaModel {
			return &tokenLog{rpm: 300, tpm: perWindow, window: time.Second, countRefused: true}
		},
		namedTPM: perWindow * 60,
		tokens:   reviewTokens,
		latency:  uniform(100*time.Millisecond, 150*time.Millisecond),
	}
}
