package testwait

import (
	"sync/atomic"
	"testing"
)

// TestUntilReturnsOnceTheConditionHolds: Until polls again until the condition is met.
func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, "the third poll", func() bool { return calls.Add(1) >= 3 })
	if n := calls.Load(); n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
}
