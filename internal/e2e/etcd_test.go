package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
)

// onEtcd configures a stack's secrets service on the etcd cluster, under prefix.
func onEtcd(endpoints []string, prefix string) func(*stack.Config) {
	return func(c *stack.Config) {
		c.Secrets.Store = "etcd"
		c.Etcd.Endpoints = endpoints
		c.Etcd.Prefix = prefix
		c.Etcd.RequestTimeout = 10 * time.Second
	}
}

// startReplicas starts two secrets replicas on the etcd cluster, each with its own gateway (so a test
// picks the replica by the REST address it calls) and its own data folder holding a copy of the
// first replica's keyring and session key: every replica must hold the same keys, or one cannot
// decrypt what another wrote.
func startReplicas(t *testing.T, endpoints []string, prefix string) (a, b *testStack) {
	t.Helper()
	replica := func(dataDir string) func(*stack.Config) {
		return func(c *stack.Config) {
			onEtcd(endpoints, prefix)(c)
			c.Target = "secrets,gateway"
			if dataDir != "" {
				c.DataDir = dataDir
			}
		}
	}
	a = startStack(t, replica(""))
	waitServing(a)
	b = startStack(t, replica(copyKeys(t, a)))
	waitServing(b)
	return a, b
}

// copyKeys returns a new data folder for another replica of a: it holds a copy of a's keyring and
// browser-session key (replicas behind one name accept each other's sessions).
func copyKeys(t *testing.T, a *testStack) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "replica-b")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"keyring.json", "session.key"} {
		data, err := os.ReadFile(filepath.Join(a.cfg.DataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitServing returns once the stack's gateway answers a request, so its REST muxes are built before
// the next gateway of the process starts: grpc-gateway's SetQueryParameterParser option writes a
// package variable, and two gateways building their muxes at once race on it.
func waitServing(s *testStack) {
	s.t.Helper()
	s.get("/v1/client_config")
}

// TestEtcdReplicas runs two secrets replicas on a three-member etcd cluster: what one writes the
// other reads at once, concurrent updates through both keep the history whole, one gateway balances
// over both (where the gateway has upstream clusters), and writes go on after one etcd member and
// one replica stop.
func TestEtcdReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	cluster := etcdtest.New(t, 3, zap.NewNop())
	a, b := startReplicas(t, cluster.Endpoints(), "/e2e-replicas/")

	// gw is one gateway with both replicas as hosts of its secrets cluster; nil with gateways that take
	// a single secrets host (before upstream clusters, issue 6).
	var gw *testStack
	gwCfg := stack.DefaultConfig().Gateway
	gwCfg.SecretsUpstream = a.SecretsAddr + "," + b.SecretsAddr
	if err := gwCfg.Validate(); err == nil {
		gw = startStack(t, func(c *stack.Config) {
			c.Target = "gateway"
			c.DataDir = a.cfg.DataDir // only to mint the test's tokens with the shared keyring
			c.Gateway.SecretsUpstream = gwCfg.SecretsUpstream
		})
		waitServing(gw)
	} else {
		t.Logf("no gateway of both replicas: %v", err)
	}

	id := a.createCredential("shared", map[string]any{"password": "v1"})
	revision := 1
	t.Run("each replica reads the other's acknowledged writes at once", func(t *testing.T) {
		writer, reader := a, b
		for round := range 6 {
			if round > 0 {
				value := fmt.Sprintf("v%d", revision+1)
				writer.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": value}}).must(t, 200)
				revision++
			}
			got := reader.get("/v1/credentials/"+id).must(t, 200)
			if got["revision"] != float64(revision) {
				t.Fatalf("round %d: revision %v read on the other replica right after writing revision %d", round, got["revision"], revision)
			}
			if pairs := asMap(t, got["credential_pairs"]); pairs["password"] != fmt.Sprintf("v%d", revision) {
				t.Fatalf("round %d: pairs %v after writing v%d", round, pairs, revision)
			}
			writer, reader = reader, writer
		}
	})

	t.Run("concurrent updates through both replicas keep the history whole", func(t *testing.T) {
		const writersPerReplica, each = 4, 6
		var wg sync.WaitGroup
		var mu sync.Mutex
		acknowledged := 0
		for _, s := range []*testStack{a, b} {
			for w := range writersPerReplica {
				wg.Go(func() {
					for i := range each {
						r := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"n": fmt.Sprintf("%s-%d-%d", s.GatewayAddr, w, i)}})
						mu.Lock()
						// Every update is acknowledged: writers of one replica queue, and one that loses
						// the compare-and-set to the other replica retries until its deadline (a 409 after
						// eight lost races was the rule before).
						if r.code == 200 {
							acknowledged++
						} else {
							t.Errorf("concurrent update: %d %s", r.code, r.body)
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		if acknowledged != 2*writersPerReplica*each {
			t.Errorf("%d acknowledged updates, want all %d", acknowledged, 2*writersPerReplica*each)
		}
		revision += acknowledged
		for _, s := range []*testStack{a, b} {
			if cur := s.get("/v1/credentials/"+id).must(t, 200); cur["revision"] != float64(revision) {
				t.Errorf("revision %v on %s after %d acknowledged writes, want %d", cur["revision"], s.GatewayAddr, acknowledged, revision)
			}
		}
		revs := asList(t, b.get("/v1/archive/credentials/"+id).must(t, 200)["revisions"])
		for i, r := range revs {
			if want := fmt.Sprintf("%s-%d", id, i+1); asMap(t, r)["id"] != want {
				t.Fatalf("history entry %d has id %v, want %s (gap or duplicate)", i, asMap(t, r)["id"], want)
			}
		}
		if len(revs) != revision {
			t.Errorf("%d history records, want %d (revisions 1..%d)", len(revs), revision, revision)
		}
	})

	t.Run("one gateway with both replicas as hosts of the secrets cluster", func(t *testing.T) {
		if gw == nil {
			t.Skip("this gateway takes a single secrets host; the subtests above reach each replica through its own gateway")
		}
		for i := range 10 {
			gw.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": fmt.Sprintf("gw-%d", i)}}).must(t, 200)
			revision++
			for _, s := range []*testStack{gw, a, b} {
				if cur := s.get("/v1/credentials/"+id).must(t, 200); cur["revision"] != float64(revision) {
					t.Fatalf("revision %v through %s right after writing %d", cur["revision"], s.GatewayAddr, revision)
				}
			}
		}
		// Both replicas served some of the gateway's 20 requests (balanced over healthy hosts).
		clusters := string(gw.admin("/clusters").body)
		for _, host := range []string{a.SecretsAddr, b.SecretsAddr} {
			var served int
			for _, line := range strings.Split(clusters, "\n") {
				if v, ok := strings.CutPrefix(line, "secrets::"+host+"::rq_success::"); ok {
					served, _ = strconv.Atoi(v)
				}
			}
			if served == 0 {
				t.Errorf("host %s of the secrets cluster served no request; /clusters:\n%s", host, clusters)
			}
		}
	})

	t.Run("a service created through one replica authenticates through the other", func(t *testing.T) {
		// The grant is recorded in the shared store, not in replica A's data folder: B refuses the
		// service before A creates it, and accepts it right after (nothing caches the refusal).
		service := http.Header{"Authorization": {a.basic("replicated", "service")}}
		r := b.do("GET", b.rest+"/v1/services/replicated", "", service)
		if body := r.must(t, 403); !strings.Contains(fmt.Sprint(body["error"]), "holds no grant") {
			t.Errorf("service without grants through B: %v", body)
		}
		a.call("PUT", "/v1/services/replicated", map[string]any{"credentials": []string{id}}).must(t, 200)
		for _, s := range []*testStack{b, a} {
			got := s.do("GET", s.rest+"/v1/services/replicated", "", service).must(t, 200)
			if got["id"] != "replicated" {
				t.Errorf("service reading itself through %s: %v", s.GatewayAddr, got)
			}
			jsonEqual(t, "grants through "+s.GatewayAddr, s.get("/v1/grants/replicated").must(t, 200),
				`{"id":"replicated","grants":{"encrypt_grant":true,"decrypt_grant":true}}`)
		}
		// PUT /v1/grants through B is idempotent over A's record.
		jsonEqual(t, "ensure grants through B", b.call("PUT", "/v1/grants/replicated", nil).must(t, 200),
			`{"id":"replicated","grants":{"encrypt_grant":true,"decrypt_grant":true}}`)
	})

	t.Run("writes go on without one etcd member and one replica", func(t *testing.T) {
		cluster.Member(0).Stop()
		a.stop()
		// The client may first try the stopped member; poll until a write lands, then every
		// following one must succeed.
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := b.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "after-failover"}})
			if r.code == 200 {
				revision++
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no write succeeded within 30s of stopping an etcd member: last %d %s", r.code, r.body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if gw != nil {
			// Through the gateway of both replicas: once it has stopped sending to the stopped
			// replica (health checks, outlier detection), five writes in a row succeed.
			deadline := time.Now().Add(30 * time.Second)
			for streak := 0; streak < 5; {
				r := gw.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": fmt.Sprintf("gw-failover-%d", streak)}})
				if r.code == 200 {
					revision++
					streak++
					continue
				}
				streak = 0
				if time.Now().After(deadline) {
					t.Fatalf("writes through the cluster gateway still fail 30s after stopping a replica: last %d %s", r.code, r.body)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		other := b.createCredential("created-after-failover", map[string]any{"k": "v"})
		b.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "again"}}).must(t, 200)
		revision++
		if cur := b.get("/v1/credentials/"+id).must(t, 200); cur["revision"] != float64(revision) {
			t.Errorf("revision %v, want %d", cur["revision"], revision)
		}
		b.get("/v1/credentials/"+other).must(t, 200)
	})
}
