package upstream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/stats"
)

func testCluster(t *testing.T, hosts ...HostConfig) *cluster {
	t.Helper()
	hc, od, panicThreshold, retry, breakers := DefaultHealthCheck(), DefaultOutlier(), DefaultConfig().HealthyPanicThreshold, DefaultRetry(), DefaultBreakers()
	c, err := newCluster(ClusterConfig{Name: "chat", Hosts: hosts, HealthCheck: &hc, Outlier: &od, HealthyPanicThreshold: &panicThreshold,
		Retry: &retry, Breakers: &breakers},
		nil, nil, stats.New(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

func TestPickIsWeightedOverHealthyHosts(t *testing.T) {
	c := testCluster(t, HostConfig{Address: "127.0.0.1:1", Weight: 1}, HostConfig{Address: "127.0.0.1:2", Weight: 3},
		HostConfig{Address: "127.0.0.1:3", Weight: 100})
	c.hosts[2].failedActiveHC = true
	counts := map[string]int{}
	for i := 0; i < 4000; i++ {
		counts[c.pick().cfg.Address]++
	}
	if counts["127.0.0.1:3"] != 0 {
		t.Errorf("the failed host got %d requests", counts["127.0.0.1:3"])
	}
	// Expect 1000 : 3000; the bounds are many standard deviations wide.
	if n := counts["127.0.0.1:1"]; n < 700 || n > 1300 {
		t.Errorf("weight 1 host got %d of 4000, want about 1000 (%v)", n, counts)
	}
	// With one host of three healthy (33% < the 50% panic threshold), every host takes requests again,
	// by weight, as in Envoy's panic mode.
	c.hosts[0].failedActiveHC = true
	counts = map[string]int{}
	for i := 0; i < 1040; i++ {
		counts[c.pick().cfg.Address]++
	}
	if n := counts["127.0.0.1:3"]; n < 900 {
		t.Errorf("in panic mode the weight 100 host got %d of 1040 (%v)", n, counts)
	}
	if n := c.lbHealthyPanic.Value(); n != 1040 {
		t.Errorf("lb_healthy_panic = %d, want 1040", n)
	}
	c.hosts[1].ejectedUntil = time.Now().Add(time.Hour)
	if h := c.pick(); h == nil {
		t.Error("no host picked in panic mode with every host down")
	}
	c.panicThreshold = 0
	if h := c.pick(); h != nil {
		t.Errorf("picked %s with every host down and panic mode off", h.cfg.Address)
	}
}

func TestOutlierEjectionTimeGrowsAndIsCapped(t *testing.T) {
	c := testCluster(t, HostConfig{Address: "127.0.0.1:1", Weight: 1}, HostConfig{Address: "127.0.0.1:2", Weight: 1})
	c.od = OutlierConfig{ConsecutiveFailures: 2, Interval: time.Second, BaseEjectionTime: 10 * time.Second, MaxEjectionTime: 25 * time.Second, MaxEjectionPercent: 50}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	h := c.hosts[0]
	fail := func(n int) {
		for i := 0; i < n; i++ {
			c.outlierResult(h, true)
		}
	}
	fail(1)
	c.outlierResult(h, false) // a success breaks the run
	fail(1)
	if !h.ejectedUntil.IsZero() {
		t.Fatal("ejected without consecutive failures")
	}
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second} {
		fail(2)
		if got := h.ejectedUntil.Sub(now); got != want {
			t.Errorf("ejection %d lasts %v, want %v", i+1, got, want)
		}
		now = h.ejectedUntil // the ejection ends
	}
	// The second host may not be ejected while the first is: 50% of 2 hosts is one.
	now = now.Add(-time.Second)
	fail(2) // host 0 is still ejected: no new ejection
	for i := 0; i < 2; i++ {
		c.outlierResult(c.hosts[1], true)
	}
	if !c.hosts[1].ejectedUntil.IsZero() {
		t.Error("ejected past max_ejection_percent")
	}
	if c.odOverflow.Value() != 1 {
		t.Errorf("ejections_overflow = %d, want 1", c.odOverflow.Value())
	}
}

func TestClustersConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yamlFile := write("clusters.yaml", `
clusters:
  - name: chat
    hosts:
      - {address: "10.0.0.5:9091", weight: 10, zone: us-east-1a}
      - {address: "10.0.0.6:9091", canary: true}
    health_check: {interval: 2s, timeout: 500ms, healthy_threshold: 2, unhealthy_threshold: 3}
`)
	jsonFile := write("clusters.json", `{"clusters":[{"name":"secrets","hosts":[{"address":"10.0.0.9:9090","weight":2}],
"outlier_detection":{"consecutive_failures":3,"interval":"5s","base_ejection_time":"10s","max_ejection_time":"60s","max_ejection_percent":50}}]}`)

	cfg := DefaultConfig()
	cfg.SecretsUpstream = "127.0.0.1:9090, 127.0.0.2:9090"
	cfg.ClustersFile = yamlFile
	got, err := cfg.Clusters()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "chat" || got[1].Name != "secrets" {
		t.Fatalf("clusters = %+v", got)
	}
	chat := got[0]
	if chat.Hosts[0].Weight != 10 || chat.Hosts[0].Zone != "us-east-1a" || chat.Hosts[1].Weight != 1 || !chat.Hosts[1].Canary ||
		chat.HealthCheck.Interval != 2*time.Second || chat.HealthCheck.UnhealthyThreshold != 3 || chat.Outlier.ConsecutiveFailures != 5 {
		t.Errorf("chat = %+v hc %+v od %+v", chat, chat.HealthCheck, chat.Outlier)
	}
	if len(got[1].Hosts) != 2 || got[1].Hosts[1].Address != "127.0.0.2:9090" {
		t.Errorf("secrets from the comma list = %+v", got[1].Hosts)
	}

	// No -chat-upstream (its default) and no chat cluster in the file: no chat cluster at all.
	cfg.ClustersFile = jsonFile
	if got, err = cfg.Clusters(); err != nil || len(got) != 1 || got[0].Name != "secrets" || got[0].Outlier.MaxEjectionPercent != 50 || got[0].Hosts[0].Weight != 2 {
		t.Errorf("json clusters = %+v, %v", got, err)
	}
	cfg.ChatUpstream = "127.0.0.1:9091"
	if got, err = cfg.Clusters(); err != nil || len(got) != 2 || got[0].Name != "chat" || got[0].Hosts[0].Address != "127.0.0.1:9091" {
		t.Errorf("json clusters with -chat-upstream = %+v, %v", got, err)
	}
	cfg.ChatUpstream = ""

	bad := []struct{ name, file, want string }{
		{"weight too high", `clusters: [{name: chat, hosts: [{address: "10.0.0.5:1", weight: 101}]}]`, "weight must be 1 to 100"},
		{"no hosts", `clusters: [{name: chat, hosts: []}]`, "has no hosts"},
		{"bad address", `clusters: [{name: chat, hosts: [{address: "nope"}]}]`, "is not host:port"},
		{"dotted name", `clusters: [{name: a.b, hosts: [{address: "10.0.0.5:1"}]}]`, "cluster name"},
		{"duplicate host", `clusters: [{name: chat, hosts: [{address: "10.0.0.5:1"}, {address: "10.0.0.5:1"}]}]`, "listed twice"},
		{"bad interval", `clusters: [{name: chat, hosts: [{address: "10.0.0.5:1"}], health_check: {interval: 0s, timeout: 1s, healthy_threshold: 1, unhealthy_threshold: 1}}]`, "interval"},
		{"not yaml", `clusters: [`, "clusters-file"},
		{"misspelled key", "clusters:\n  - name: chat\n    hosts:\n      - {address: \"10.0.0.5:1\", wieght: 3}\n", "line 4: field wieght not found"},
		{"misspelled block", "clusters:\n  - name: chat\n    hosts: [{address: \"10.0.0.5:1\"}]\n    helth_check: {interval: 1s}\n", "field helth_check not found"},
		{"misspelled cluster", "clusters:\n  - name: chat\n    hosts: [{address: \"10.0.0.5:1\"}]\n  - name: secret\n    hosts: [{address: \"10.0.0.5:2\"}]\n", `bad.yaml:4: cluster "secret": no route uses it`},
		{"cluster twice", "clusters:\n  - name: chat\n    hosts: [{address: \"10.0.0.5:1\"}]\n  - name: chat\n    hosts: [{address: \"10.0.0.5:2\"}]\n", `bad.yaml:4: cluster "chat" is listed twice (first at line 2)`},
		{"bad retry", `clusters: [{name: chat, hosts: [{address: "10.0.0.5:1"}], retry_policy: {num_retries: 50}}]`, "num-retries"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ClustersFile = write("bad.yaml", tt.file)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "-clusters-file") {
				t.Errorf("err = %v, want it to name -clusters-file and say %q", err, tt.want)
			}
		})
	}
	cfg = DefaultConfig()
	cfg.ChatUpstream = "127.0.0.1:1,nope"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-chat-upstream") {
		t.Errorf("bad chat upstream: %v", err)
	}
	cfg = DefaultConfig()
	cfg.HealthCheck.Timeout = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-health-check-timeout") {
		t.Errorf("bad timeout: %v", err)
	}
	cfg = DefaultConfig()
	cfg.Outlier.MaxEjectionPercent = 101
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-outlier-max-ejection-percent") {
		t.Errorf("bad percent: %v", err)
	}
}

func TestDeployClustersExampleIsValid(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClustersFile = filepath.Join("..", "..", "deploy", "clusters.yaml")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("deploy/clusters.yaml: %v", err)
	}
}
