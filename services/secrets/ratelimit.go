package secrets

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
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
	return fmt.Sprintf("too many writes: this caller may make %g writes per second, %d at once (set by %s and %s, or for this caller by %s); retry after %d s",
		e.Rate, e.Burst, settingName(flagWriteRate), settingName(flagWriteBurst), settingName(flagWritePrincipals), e.RetryAfterSeconds())
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
	limit rate.Limit
	burst int
	// overrides are the principals with their own allowance, by rateKey; a zero limit exempts one.
	overrides     map[string]writeAllowance
	maxPrincipals int
	now           func() time.Time

	mu      sync.Mutex
	buckets map[string]*list.Element // of *principalBucket
	lru     *list.List               // front: most recently used
}

type principalBucket struct {
	key     string
	limiter *rate.Limiter
	burst   int
}

// writeAllowance is a token bucket's rate and size.
type writeAllowance struct {
	limit rate.Limit
	burst int
}

// newWriteLimiter returns a limiter of perSecond writes (burst at once) per principal, with the
// allowances of principals (keyed "type:name") instead for those, or nil, which admits everything,
// when perSecond is 0 and no principal has a limit of its own.
func newWriteLimiter(perSecond float64, burst, maxPrincipals int, now func() time.Time, principals map[string]PrincipalWriteLimit) *writeLimiter {
	overrides := map[string]writeAllowance{}
	limited := perSecond > 0
	for key, p := range principals {
		typ, name, _ := strings.Cut(key, ":")
		a := writeAllowance{limit: rate.Limit(p.Rate), burst: p.Burst}
		if a.burst == 0 {
			a.burst = burst
		}
		overrides[rateKey(Principal{Type: typ, Name: name})] = a
		limited = limited || p.Rate > 0
	}
	if !limited {
		return nil
	}
	limit := rate.Limit(perSecond)
	if perSecond <= 0 {
		limit = 0 // only the named principals are limited: the others are exempt
	}
	return &writeLimiter{limit: limit, burst: burst, overrides: overrides, maxPrincipals: maxPrincipals, now: now,
		buckets: map[string]*list.Element{}, lru: list.New()}
}

// allowance is key's rate and size: its own, or the default.
func (w *writeLimiter) allowance(key string) writeAllowance {
	if a, ok := w.overrides[key]; ok {
		return a
	}
	return writeAllowance{limit: w.limit, burst: w.burst}
}

// admit takes one write from key's bucket. When the bucket is empty nothing is taken and wait says
// how long until a write is allowed; a principal without a limit (rate 0) is always admitted.
func (w *writeLimiter) admit(key string) (wait time.Duration, ok bool) {
	if w.allowance(key).limit == 0 {
		return 0, true
	}
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
	a := w.allowance(key)
	b := &principalBucket{key: key, limiter: rate.NewLimiter(a.limit, a.burst), burst: a.burst}
	w.buckets[key] = w.lru.PushFront(b)
	return b
}

// dropFull forgets the least recently used buckets that have refilled completely: forgetting them
// changes no answer, and it keeps the map as small as the set of principals writing lately.
func (w *writeLimiter) dropFull(now time.Time) {
	for e := w.lru.Back(); e != nil; e = w.lru.Back() {
		if b := e.Value.(*principalBucket); b.limiter.TokensAt(now) < float64(b.burst) {
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
	key := rateKey(PrincipalFrom(ctx))
	wait, ok := s.writes.admit(key)
	if ok {
		return nil
	}
	if s.stats != nil {
		s.stats.Counter(statWriteRateRefused).Inc()
	}
	a := s.writes.allowance(key)
	return &RateLimitedError{RetryAfter: wait, Rate: float64(a.limit), Burst: a.burst}
}
