package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
)

// TestEtcdQuorumLostAnswers503Fast: with two of three etcd members stopped (quorum lost), reads and
// writes through the gateway answer 503 "storage unavailable" at once, once the replica's member
// probe has seen the cluster without a leader. On main every request waited the 5 s etcd request
// timeout: writes answered 503 after it, reads ran into the gateway's per-try timeouts and answered 504.
func TestEtcdQuorumLostAnswers503Fast(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	cluster := etcdtest.New(t, 3, zap.NewNop())
	const requestTimeout = 5 * time.Second
	s := startStack(t, func(c *stack.Config) {
		onEtcd(cluster.Endpoints(), "/e2e-quorum/")(c)
		c.Etcd.RequestTimeout = requestTimeout
		c.Etcd.ProbeInterval = 100 * time.Millisecond
		c.Etcd.ProbeTimeout = 500 * time.Millisecond
	})
	id := s.createCredential("quorum", map[string]any{"password": "v1"})
	cluster.Member(1).Stop()
	cluster.Member(2).Stop()

	fast := requestTimeout / 4
	deadline := time.Now().Add(45 * time.Second)
	for streak := 0; streak < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("45 s after the quorum was lost, requests still do not answer 503 within %v", fast)
		}
		streak++
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{http.MethodGet, "/v1/credentials/" + id, nil},
			{http.MethodPut, "/v1/credentials/" + id, map[string]any{"credential_pairs": map[string]any{"password": "v2"}}},
			{http.MethodGet, "/v1/credentials", nil},
		} {
			start := time.Now()
			r := s.call(req.method, req.path, req.body)
			took := time.Since(start)
			if r.code != http.StatusServiceUnavailable || took > fast {
				t.Logf("%s %s without quorum: %d %s after %v", req.method, req.path, r.code, r.body, took)
				streak = 0
			}
		}
	}
}

// TestEtcdMemberCutOffKeepsServing: with one etcd member of three cut off from its peers (it still
// answers clients), requests through the gateway keep succeeding once the replica's member probe has
// taken it out of service; after the heal it serves again. On main every write the client sent to
// the cut-off member waited the etcd request timeout and answered 503, and soon every client waited
// in one: 0–6 operations/s for the whole cut. A follower, then the leader is cut.
func TestEtcdMemberCutOffKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	cluster := etcdtest.New(t, 3, zap.NewNop())
	s := startStack(t, func(c *stack.Config) {
		onEtcd(cluster.Endpoints(), "/e2e-cut/")(c)
		c.Etcd.RequestTimeout = 5 * time.Second
		c.Etcd.ProbeInterval = 100 * time.Millisecond
		c.Etcd.ProbeTimeout = 500 * time.Millisecond
		unlimitedWrites(c) // six clients writing as one user as fast as they can
	})
	const clients = 6
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = s.createCredential(fmt.Sprintf("cut-%d", i), map[string]any{"password": "v0"})
	}
	// Each client updates its own credential and reads it back; streak counts the requests that
	// succeeded in a row, over all clients, since the last failure.
	var streak, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var code int
				if n%2 == 0 {
					code = s.tryCall(http.MethodPut, "/v1/credentials/"+ids[c], fmt.Sprintf(`{"credential_pairs":{"password":"v%d"}}`, n))
				} else {
					code = s.tryCall(http.MethodGet, "/v1/credentials/"+ids[c], "")
				}
				if code == http.StatusOK {
					streak.Add(1)
				} else {
					failed.Add(1)
					streak.Store(0)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	// Far more requests than the clients could send between two waves of writes held by the cut-off
	// member (each held the 5 s request timeout before).
	const wantStreak = 300
	for _, victim := range []string{"follower", "leader"} {
		testwait.Until(t, "a leader", func() bool { return cluster.Leader() >= 0 })
		i := cluster.Leader()
		if victim == "follower" {
			i = (i + 1) % 3
		}
		failed.Store(0)
		streak.Store(0)
		cluster.PartitionPeers(i)
		testwait.Until(t, fmt.Sprintf("%d requests in a row succeeding with the %s cut off", wantStreak, victim), func() bool {
			return streak.Load() >= wantStreak
		})
		t.Logf("%s cut off: %d requests failed before the replica routed around it", victim, failed.Load())
		cluster.HealPeers(i)
	}
}

// tryCall sends a JSON body to a path of the REST listener from any goroutine and returns the
// status, 0 when the request failed without one.
func (s *testStack) tryCall(method, path, body string) int {
	c := client
	if s.https != nil {
		c = s.https
	}
	req, err := http.NewRequest(method, s.rest+path, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if s.asUser != "" {
		req.Header.Set("Authorization", s.asUser)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
