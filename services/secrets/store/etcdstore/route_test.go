package etcdstore

import (
	"sync/atomic"
	"testing"
)

// TestPickPrefersTheLeader: with a leader known and in service, every request tries it first, and a
// retry goes to another member; a leader out of service, or none known, leaves the members in turn.
func TestPickPrefersTheLeader(t *testing.T) {
	ms := []*member{{endpoint: "a"}, {endpoint: "b"}, {endpoint: "c"}}
	r := newRouter(ms, &atomic.Bool{})
	seen := map[string]bool{}
	for range 6 {
		seen[r.pick(nil).endpoint] = true
	}
	if len(seen) != 3 {
		t.Fatalf("without a leader the picks went to %v, want every member in turn", seen)
	}
	r.leader.Store(ms[1])
	for range 6 {
		if got := r.pick(nil); got != ms[1] {
			t.Fatalf("with b leading, a first try went to %s", got.endpoint)
		}
	}
	if got := r.pick([]*member{ms[1]}); got == ms[1] {
		t.Fatalf("a retry after the leader failed went to the leader again")
	}
	// b out of service (the probe's serving list): the others take the requests.
	serving := []*member{ms[0], ms[2]}
	r.serving.Store(&serving)
	for range 6 {
		if got := r.pick(nil); got == ms[1] {
			t.Fatalf("a request went to the leader out of service")
		}
	}
}
