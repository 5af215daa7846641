// Package testwait is how a test waits for a condition: it polls until the condition holds and
// fails the test, naming what it waited for, when it still does not after HangDeadline. That
// deadline only bounds a hang: a loaded machine (CI runs the tests beside a CPU hog per core) may
// take many times longer than a quiet one to get there, so a test never asserts that something
// happened within a short time, and never waits for an amount of wall time instead of the event.
package testwait

import (
	"testing"
	"time"
)

// HangDeadline is how long Until polls before it calls the wait a hang.
const HangDeadline = 60 * time.Second

// pollEvery sets only how soon a met condition is noticed.
const pollEvery = 2 * time.Millisecond

// Until polls cond until it holds; after HangDeadline it fails the test with what it waited for.
// Call it from the test's goroutine (it may call t.Fatalf).
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(HangDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %v: a hang", what, HangDeadline)
		}
		time.Sleep(pollEvery)
	}
}
