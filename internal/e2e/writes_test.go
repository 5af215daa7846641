package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/etcdtest"
)

// concurrentUpdatesOfOne runs writers clients at once, each sending `each` updates of credential id
// one after the other, client w through stacks[w % len(stacks)], and checks that every update was
// acknowledged (200: none refused for losing a race) with a revision of its own — from+1 ..
// from+writers*each, each once — and that the history holds every revision without gap or
// duplicate. (That no update overwrote another unseen is checked on the decrypted history in the
// service's TestConcurrentUpdatesOfOneCredentialEachGetARevision.)
func concurrentUpdatesOfOne(t *testing.T, stacks []*testStack, id string, from, writers, each int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var revisions []int
	for w := range writers {
		s := stacks[w%len(stacks)]
		wg.Go(func() {
			for i := range each {
				r := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"n": fmt.Sprintf("writer-%d-%d", w, i)}})
				if r.code != 200 {
					t.Errorf("writer %d, update %d: %d %s", w, i, r.code, r.body)
					continue
				}
				mu.Lock()
				revisions = append(revisions, int(r.json(t)["revision"].(float64)))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := writers * each
	slices.Sort(revisions)
	for i, r := range revisions {
		if r != from+1+i {
			t.Fatalf("acknowledged revisions %v, want %d..%d each once", revisions, from+1, from+total)
		}
	}
	revs := asList(t, stacks[0].get("/v1/archive/credentials/"+id).must(t, 200)["revisions"])
	if len(revs) != from+total {
		t.Fatalf("%d history records, want %d", len(revs), from+total)
	}
	for i, r := range revs {
		if want := fmt.Sprintf("%s-%d", id, i+1); asMap(t, r)["id"] != want {
			t.Fatalf("history entry %d has id %v, want %s (gap or duplicate)", i, asMap(t, r)["id"], want)
		}
	}
}

// TestConcurrentUpdatesOfOneCredentialAllSucceed: 16 clients updating one credential at once through
// the gateway each get 200 and a revision of their own, 2..17 (before, most lost the compare-and-set
// race eight times and got 409 "the record is being updated concurrently; retry").
func TestConcurrentUpdatesOfOneCredentialAllSucceed(t *testing.T) {
	s := startStack(t, unlimitedWrites)
	id := s.createCredential("hot-16", map[string]any{"n": "0"})
	concurrentUpdatesOfOne(t, []*testStack{s}, id, 1, 16, 1)
}

// TestEtcdConcurrentUpdatesThroughTwoReplicasAllSucceed: 16 writers split over two secrets replicas
// sharing etcd, 5 updates each: within a replica they queue, across replicas the loser of the
// compare-and-set reads again and retries until its deadline; none sees a 409.
func TestEtcdConcurrentUpdatesThroughTwoReplicasAllSucceed(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	// fsync on, so a write takes as long as in production and the replicas' writes overlap.
	cluster := etcdtest.New(t, 1, zap.NewNop(), etcdtest.Durable())
	a, b := startReplicas(t, cluster.Endpoints(), "/e2e-writes/")
	id := a.createCredential("hot-etcd", map[string]any{"n": "0"})
	concurrentUpdatesOfOne(t, []*testStack{a, b}, id, 1, 16, 5)
}

// TestIfMatch: gantry's opt-in optimistic concurrency. A PUT with If-Match: <revision> writes only
// while that revision is current; a stale one answers 412 and writes nothing; a malformed one 400.
func TestIfMatch(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("guarded", map[string]any{"n": "0"})
	put := func(path, ifMatch string, body any) response {
		t.Helper()
		payload := ""
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			payload = string(b)
		}
		header := http.Header{"Content-Type": {"application/json"}}
		if ifMatch != "" {
			header.Set("If-Match", ifMatch)
		}
		return s.do("PUT", s.rest+path, payload, header)
	}
	update := map[string]any{"credential_pairs": map[string]any{"n": "1"}}

	stale := put("/v1/credentials/"+id, "2", update)
	if body := stale.must(t, 412); !strings.Contains(fmt.Sprint(body["error"]), "current revision of the credential is 1, not 2") {
		t.Errorf("stale If-Match: %v", body)
	}
	if got := s.get("/v1/credentials/"+id).must(t, 200)["revision"]; got != float64(1) {
		t.Fatalf("revision %v after a refused write, want 1", got)
	}
	if got := put("/v1/credentials/"+id, "1", update).must(t, 200)["revision"]; got != float64(2) {
		t.Errorf("If-Match: 1 on revision 1 wrote revision %v, want 2", got)
	}
	if got := put("/v1/credentials/"+id, `"2"`, map[string]any{"enabled": false}).must(t, 200)["revision"]; got != float64(3) {
		t.Errorf(`If-Match: "2" on revision 2 wrote revision %v, want 3`, got)
	}
	put("/v1/credentials/"+id, "not-a-revision", update).must(t, 400)
	put("/v1/credentials/"+id+"/1", "2", nil).must(t, 412) // revert, expecting a replaced revision
	put("/v1/credentials/"+id+"/1", "3", nil).must(t, 200)

	service := map[string]any{"credentials": []string{id}}
	put("/v1/services/guarded-svc", "1", service).must(t, 412) // does not exist yet
	put("/v1/services/guarded-svc", "", service).must(t, 200)
	put("/v1/services/guarded-svc", "2", map[string]any{"credentials": []string{}}).must(t, 412)
	put("/v1/services/guarded-svc", "1", map[string]any{"credentials": []string{}}).must(t, 200)
}
