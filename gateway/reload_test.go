package gateway

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReloadSwapsHostsUnderLoad: rewriting the clusters file and reloading adds and removes hosts
// while requests keep flowing, and no request fails; a bad file is rejected and changes nothing.
func TestReloadSwapsHostsUnderLoad(t *testing.T) {
	a, b := startEcho(t), startEcho(t)
	file := filepath.Join(t.TempDir(), "clusters.yaml")
	writeClusters := func(hosts ...string) {
		t.Helper()
		var list []string
		for _, h := range hosts {
			list = append(list, `{address: "`+h+`"}`)
		}
		if err := os.WriteFile(file, []byte("clusters:\n  - name: chat\n    hosts: ["+strings.Join(list, ", ")+"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeClusters(a)
	h := startHarness(t, func(c *Config) { c.ClustersFile = file })

	var stop atomic.Bool
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				sent.Add(1)
				if code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil); code != http.StatusOK {
					failed.Add(1)
					t.Errorf("request during reload: %d %s", code, body)
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	writeClusters(a, b)
	if err := h.gw.Reload(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	bBefore := clusterLines(t, h.admin, "chat", b)["rq_total"]
	if bBefore == "" || bBefore == "0" {
		t.Errorf("the added host got no request (rq_total %q)", bBefore)
	}
	writeClusters(b)
	if err := h.gw.Reload(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if lines := clusterLines(t, h.admin, "chat", a); len(lines) != 0 {
		t.Errorf("the removed host is still listed: %v", lines)
	}
	// A bad file: rejected, the running clusters stay.
	if err := os.WriteFile(file, []byte("clusters:\n  - name: chat\n    hosts: [{address: \""+b+"\", wieght: 2}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Reload(); err == nil || !strings.Contains(err.Error(), "wieght") {
		t.Errorf("bad file reload: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 || sent.Load() < 20 {
		t.Fatalf("%d of %d requests failed", failed.Load(), sent.Load())
	}
	if got := statValue(t, h.admin, "cluster_manager.cds.update_success"); got != 2 {
		t.Errorf("update_success = %d, want 2", got)
	}
	if got := statValue(t, h.admin, "cluster_manager.cds.update_rejected"); got != 1 {
		t.Errorf("update_rejected = %d, want 1", got)
	}
	if lines := clusterLines(t, h.admin, "chat", b); lines["health_flags"] != "healthy" {
		t.Errorf("after the rejected reload: %v", lines)
	}
}
