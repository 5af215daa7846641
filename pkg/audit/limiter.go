package audit

import (
	"sync"
	"time"
)

// RefusalLimiter bounds the records of refusals that need no credentials to cause (a flood of
// requests without any): Burst records per second of its clock, counting the others so the next
// record let through can say how many were left out (Record.Suppressed).
type RefusalLimiter struct {
	// Burst is how many records a second lets through; 0 means DefaultRefusalBurst.
	Burst int
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu         sync.Mutex
	second     int64
	logged     int
	suppressed int64
}

// DefaultRefusalBurst is enough to see who is knocking, too few for a flood to flood the trail.
const DefaultRefusalBurst = 10

// Allow tells whether a record may be written now and, if so, how many were suppressed since the last.
func (l *RefusalLimiter) Allow() (suppressedBefore int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, burst := time.Now, l.Burst
	if l.Now != nil {
		now = l.Now
	}
	if burst <= 0 {
		burst = DefaultRefusalBurst
	}
	if second := now().Unix(); second != l.second {
		l.second, l.logged = second, 0
	}
	if l.logged >= burst {
		l.suppressed++
		return 0, false
	}
	l.logged++
	suppressedBefore, l.suppressed = l.suppressed, 0
	return suppressedBefore, true
}
