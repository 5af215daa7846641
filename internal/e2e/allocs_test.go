package e2e

import (
	"fmt"
	"testing"
)

// readAllocationBudget bounds the allocations of one read through the gateway, client side included
// (about 60 of them are the test's HTTP client). Measured after issue 43: 335 for a credential and 710
// for a service of 10 credentials, 353 and 739 under -race (401 and about 850 before: grpc-gateway
// tried some 30 patterns before the hot reads', each miss allocating, and the in-process answer was a
// deep copy; 644 and 1,537 before issue 29). The budgets leave about 10% above the -race figures, so a
// change that brings allocations back into the path of every read fails here, not in a benchmark
// nobody reads.
var readAllocationBudget = map[string]float64{"credential_read": 390, "service_read_10_credentials": 810}

// TestReadAllocationBudget counts the allocations per read (testing.AllocsPerRun: every goroutine's,
// server and client) against the budget. Allocation counts do not depend on the machine's speed or
// load, unlike timings, which belong in benchmarks.
func TestReadAllocationBudget(t *testing.T) {
	s := startStack(t, unlimitedWrites)
	paths := readPaths(t, s)
	for _, name := range readWorkloads {
		t.Run(name, func(t *testing.T) {
			path := paths[name]
			for range 50 { // warm the caches (token, data key, connections)
				s.get(path).must(t, 200)
			}
			var failed error
			allocs := testing.AllocsPerRun(300, func() {
				if r := s.get(path); r.code != 200 && failed == nil {
					failed = fmt.Errorf("%s: %d %s", path, r.code, r.body)
				}
			})
			if failed != nil {
				t.Fatal(failed)
			}
			t.Logf("%s: %.0f allocations per read (budget %.0f)", name, allocs, readAllocationBudget[name])
			if allocs > readAllocationBudget[name] {
				t.Errorf("%s: %.0f allocations per read, over the budget of %.0f", name, allocs, readAllocationBudget[name])
			}
		})
	}
}
