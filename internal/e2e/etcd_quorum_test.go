package e2e

import (
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
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
