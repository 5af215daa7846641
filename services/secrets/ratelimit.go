package secrets

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxRateLimitedPrincipals caps the principals whose write allowance is remembered. Beyond it the
// least recently seen one is forgotten (it starts again with a full burst), so a stream of distinct
// principals costs a bounded amount of memory (a few hundred bytes each) rather than growing the map.
const maxRateLimitedPrincipals = 10000

// RateLimitedError refuses a write because its principal used up its write allowance (Limits.WriteRate
// and WriteBurst): a 429 with Retry-After. Nothing was done.
type RateLimitedError struct {
	// RetryAfter is how long until the principal may write again.
	RetryAfter time.Duration
	// Rate and Burst are the configured allowance, for the message.
	Rate  float64
	Burst int
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many writes: each caller may make %g writes per second, %d at once (set by %s, and %s); retry after %d s",
		e.Rate, e.Burst, settingName(flagWriteRate), settingName(flagWriteBurst), e.RetryAfterSeconds())
}

// RetryAfterSeconds is RetryAfter as HTTP's Retry-After wants it: whole seconds, rounded up, at least 1
// (0 would invite an immediate retry that fails again).
func (e *RateLimitedError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// writeLimiter is a token bucket per principal. Buckets live in an LRU list; a bucket that has
// refilled to its burst is the same as a new one, so it is dropped as soon as it is found at the old
// end of the list, and when maxPrincipals buckets are in use the least recently used one goes.
type writeLimiter struct {
	limit         rate.Limit
	burst         int
	maxPrincipals int
	now           func() time.Time

	mu      sync.Mutex
	buckets map[string]*list.Element // of *principalBucket
	lru     *list.List               // front: most recently used
}

type principalBucket struct {
	key     string
	limiter *rate.Limiter
}

// newWriteLimiter returns a limiter of perSecond writes (burst at once) per principal, or nil, which
// admits everything, when perSecond is 0.
func newWriteLimiter(perSecond float64, burst, maxPrincipals int, now func() time.Time) *writeLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &writeLimiter{limit: rate.Limit(perSecond), burst: burst, maxPrincipals: maxPrincipals, now: now,
		buckets: map[string]*list.Element{}, lru: list.New()}
}

// admit takes one write from key's bucket. When the bucket is empty nothing is taken and wait says
// how long until a write is allowed.
func (w *writeLimiter) admit(key string) (wait time.Duration, ok bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.bucket(key, now)
	r := b.limiter.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // a refused write must not use up the allowance of the next one
		return d, false
	}
	return 0, true
}

// bucket returns key's bucket, made the most recently used, creating it (and making room) if needed.
func (w *writeLimiter) bucket(key string, now time.Time) *principalBucket {
	if e, ok := w.buckets[key]; ok {
		w.lru.MoveToFront(e)
		return e.Value.(*principalBucket)
	}
	w.dropFull(now)
	for w.lru.Len() >= w.maxPrincipals {
		w.remove(w.lru.Back())
	}
	b := &principalBucket{key: key, limiter: rate.NewLimiter(w.limit, w.burst)}
	w.buckets[key] = w.lru.PushFront(b)
	return b
}

// dropFull forgets the least recently used buckets that have refilled completely: forgetting them
// changes no answer, and it keeps the map as small as the set of principals writing lately.
func (w *writeLimiter) dropFull(now time.Time) {
	for e := w.lru.Back(); e != nil; e = w.lru.Back() {
		if e.Value.(*principalBucket).limiter.TokensAt(now) < float64(w.burst) {
			return
		}
		w.remove(e)
	}
}

func (w *writeLimiter) remove(e *list.Element) {
	delete(w.buckets, e.Value.(*principalBucket).key)
	w.lru.Remove(e)
}

// size is the number of principals remembered.
func (w *writeLimiter) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lru.Len()
}

// maxRateKeyBytes bounds the key a bucket is remembered by; longer principal names are hashed, so
// the memory of a full limiter does not depend on how long names may be.
const maxRateKeyBytes = 128

// rateKey is the bucket of a principal: its type and name. The type cannot contain ':' or '#', so
// "user:x" and "service:x" never share a bucket, and neither does a short name with the hash of a long
// one (the hashed form puts '#' after the type, where a name's key has ':').
func rateKey(p Principal) string {
	key := p.Type + ":" + p.Name
	if len(key) <= maxRateKeyBytes {
		return key
	}
	sum := sha256.Sum256([]byte(p.Name))
	return p.Type + "#" + hex.EncodeToString(sum[:])
}

// AdmitWrite takes one write from the allowance of the caller (the principal in ctx) and refuses the
// call with a RateLimitedError when it is used up. The transport calls it before dispatching every
// call that changes state, once the caller is authenticated; reads are never limited. The allowance
// is per replica: N replicas admit N times the rate.
func (s *Service) AdmitWrite(ctx context.Context) error {
	if s.writes == nil {
		return nil
	}
	wait, ok := s.writes.admit(rateKey(PrincipalFrom(ctx)))
	if ok {
		return nil
	}
	if s.stats != nil {
		s.stats.Counter(statWriteRateRefused).Inc()
	}
	return &RateLimitedError{RetryAfter: wait, Rate: s.cfg.Limits.WriteRate, Burst: s.cfg.Limits.WriteBurst}
}
