// This file holds implicit caching: a request whose prompt starts like a
// recent request's is billed less for the shared start, reported as
// usageMetadata.cachedContentTokenCount.

package geminisim

import (
	"crypto/sha256"
	"time"
	"unicode/utf8"
)

// Defaults of CacheConfig's zero fields.
const (
	DefaultCacheMinTokens = 1024
	DefaultCacheTTL       = 5 * time.Minute
	// cacheChunk is the granularity, in tokens, of a cached prefix: a
	// hit counts whole chunks of the shared start.
	cacheChunk = 128
)

// CacheConfig configures implicit caching. The zero value caches
// prefixes of at least DefaultCacheMinTokens for DefaultCacheTTL.
type CacheConfig struct {
	// Off disables implicit caching: no call reports cached tokens.
	Off bool
	// MinTokens is the shortest prefix, in the simulator's own token
	// estimate (4 characters a token), that is cached: the real
	// minimum is 1,024-4,096 tokens by model. Default
	// DefaultCacheMinTokens.
	MinTokens int
	// TTL is how long after the last request that sent a prefix it can
	// still be hit. Default DefaultCacheTTL.
	TTL time.Duration
}

// prefixCache remembers recent prompt prefixes, per model, at each whole
// chunk. Guarded by the Server's mutex.
type prefixCache struct {
	seen map[[32]byte]time.Time // prefix hash -> last sent
	next time.Time              // when to prune next
}

// promptRunes is the prompt as the cache sees it: the system instruction's
// text, then the contents' text, in order.
func (q *genRequest) promptRunes() []rune {
	var rs []rune
	add := func(c *content) {
		for _, p := range c.Parts {
			rs = append(rs, []rune(p.Text)...)
		}
	}
	if q.SystemInstruction != nil {
		add(q.SystemInstruction)
	}
	for i := range q.Contents {
		add(&q.Contents[i])
	}
	return rs
}

// cached returns how many of the prompt's tokens (of promptTokens) start
// like a prefix sent within the TTL for model, and remembers this
// prompt's prefixes. Call with s.mu held.
func (s *Server) cached(model string, prompt []rune, promptTokens int, now time.Time) int {
	cc := s.cfg.Cache
	if cc.Off {
		return 0
	}
	pc := &s.prefixes
	if pc.seen == nil {
		pc.seen = make(map[[32]byte]time.Time)
	}
	if now.After(pc.next) {
		for h, at := range pc.seen {
			if now.Sub(at) > cc.TTL {
				delete(pc.seen, h)
			}
		}
		pc.next = now.Add(cc.TTL)
	}
	// The whole prompt is never all cached: the real API reports a hit
	// within the prompt, so at least its last chunk is new.
	h := sha256.New()
	h.Write([]byte(model))
	h.Write([]byte{0})
	hit := 0
	var buf [utf8.UTFMax]byte
	for i, r := range prompt {
		n := utf8.EncodeRune(buf[:], r)
		h.Write(buf[:n])
		runes := i + 1
		if runes%(cacheChunk*4) != 0 {
			continue
		}
		tokens := runes / 4
		if tokens >= promptTokens {
			break
		}
		var key [32]byte
		h.Sum(key[:0])
		if at, ok := pc.seen[key]; ok && now.Sub(at) <= cc.TTL && tokens >= cc.MinTokens {
			hit = tokens
		}
		pc.seen[key] = now
	}
	return hit
}
