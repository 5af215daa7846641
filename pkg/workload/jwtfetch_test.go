package workload

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/pkg/workload/workloadtest"
)

// testClock is a verifier's clock that only the test's own straight-line code moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// discoveryVerifier trusts is as a Kubernetes issuer whose keys come by OIDC discovery (no key file,
// no jwks_url), mapping shop/orders to the service orders.
func discoveryVerifier(t *testing.T, is *workloadtest.Issuer, clock *testClock, fetchTimeout time.Duration) *JWTVerifier {
	t.Helper()
	v, err := NewJWTVerifier(JWTConfig{
		Issuers:      []IssuerConfig{{Name: "prod-cluster", Kind: KindKubernetes, Issuer: is.URL, Audiences: []string{"gantry"}}},
		Mappings:     []Mapping{{Issuer: "prod-cluster", Namespace: "shop", ServiceAccount: "orders", Service: "orders"}},
		Now:          clock.now,
		FetchTimeout: fetchTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mustAccept verifies a token that must map to the service orders.
func mustAccept(t *testing.T, v *JWTVerifier, token, what string) {
	t.Helper()
	if id, err := v.Verify(context.Background(), token); err != nil || id.Service != "orders" {
		t.Fatalf("%s: %+v, %v; want the service orders", what, id, err)
	}
}

// TestJWTKeyServerFailuresAreThrottled is the first phase of issue 40's report: an issuer's keys are
// cached, then its key server answers 500, and tokens with key ids it never had (an anonymous
// flood) arrive 30 at once. Each window costs the key server one request at most, failed or not:
// 30 s after a success, then 30 s, 60 s, 120 s after failures in a row; every one of those tokens is
// refused, and a token whose key is cached is accepted throughout without a fetch. Once the key
// server is back, the window is 30 s again.
func TestJWTKeyServerFailuresAreThrottled(t *testing.T) {
	is := workloadtest.New(t)
	clock := &testClock{t: time.Now()}
	v := discoveryVerifier(t, is, clock, 0)
	claims := is.KubernetesClaims("shop", "orders", "gantry", clock.now(), time.Hour)
	valid := is.Sign(t, workloadtest.KidRSA, claims)
	unknown := make([]string, 30)
	for i := range unknown {
		unknown[i] = is.Sign(t, fmt.Sprintf("rotated-%d", i), claims)
	}
	mustAccept(t, v, valid, "the first token (keys fetched)")
	if n := is.Requests(); n != 2 {
		t.Fatalf("%d requests to fetch the keys, want 2 (discovery, key set)", n)
	}

	// flood sends the 30 tokens at once, then the valid one, and returns how many requests reached the
	// key server meanwhile.
	flood := func(what string) int64 {
		t.Helper()
		before := is.Requests()
		var wg sync.WaitGroup
		for _, token := range unknown {
			wg.Go(func() {
				if _, err := v.Verify(context.Background(), token); !errors.Is(err, ErrRefused) {
					t.Errorf("%s: a token of a key the issuer never had: %v, want a refusal", what, err)
				}
			})
		}
		wg.Wait()
		mustAccept(t, v, valid, what+": the token whose key is cached")
		return is.Requests() - before
	}
	expect := func(what string, want int64) {
		t.Helper()
		if got := flood(what); got != want {
			t.Fatalf("%s: 30 tokens of unknown keys made %d requests to the key server, want %d", what, got, want)
		}
	}

	is.SetFault(workloadtest.Fault{Status: http.StatusInternalServerError})
	clock.advance(31 * time.Second)
	expect("31 s after the successful fetch, the key server failing", 1)
	expect("right after the failed fetch", 0)
	clock.advance(29 * time.Second)
	expect("29 s after the failure", 0)
	clock.advance(time.Second)
	expect("30 s after the failure", 1)
	clock.advance(59 * time.Second)
	expect("59 s after the second failure in a row", 0)
	clock.advance(time.Second)
	expect("60 s after the second failure in a row", 1)

	is.SetFault(workloadtest.Fault{})
	clock.advance(119 * time.Second)
	expect("119 s after the third failure in a row, the key server back", 0)
	clock.advance(time.Second)
	expect("120 s after the third failure in a row", 2) // discovery and key set: a success
	clock.advance(29 * time.Second)
	expect("29 s after the success", 0)
	clock.advance(time.Second)
	expect("30 s after the success", 2)
}

// TestJWTCachedKeyNeverWaitsForAFetch is the second phase of issue 40's report: with the issuer's key
// server hanging on a fetch (started by a token of a key the cache lacks), a token whose key is
// cached is accepted while the key server still holds that fetch, not after it ends. The token of
// the new key waits for the fetch in flight and is refused once its answer lacks that key.
func TestJWTCachedKeyNeverWaitsForAFetch(t *testing.T) {
	is := workloadtest.New(t)
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the issuer's server closes: it waits for held answers
	clock := &testClock{t: time.Now()}
	// The fetch timeout only bounds a hang here: the test ends the fetch by releasing it.
	v := discoveryVerifier(t, is, clock, time.Hour)
	claims := is.KubernetesClaims("shop", "orders", "gantry", clock.now(), time.Hour)
	mustAccept(t, v, is.Sign(t, workloadtest.KidEC, claims), "the first token (keys fetched)")

	is.SetFault(workloadtest.Fault{Hold: hold})
	clock.advance(31 * time.Second) // a key the cache lacks may be fetched again
	rotated := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), is.Sign(t, "rotated-1", claims))
		rotated <- err
	}()
	testwait.Until(t, "the key server to hold the fetch of the key rotated-1", func() bool { return is.Held() == 1 })

	valid := is.Sign(t, workloadtest.KidRSA, claims)
	accepted := make(chan error, 1)
	go func() {
		id, err := v.Verify(context.Background(), valid)
		if err == nil && id.Service != "orders" {
			err = fmt.Errorf("verified as %+v", id)
		}
		accepted <- err
	}()
	var err error
	testwait.Until(t, "the token whose key is cached to be verified", func() bool {
		select {
		case err = <-accepted:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatalf("the token whose key is cached: %v", err)
	}
	if held, abandoned := is.Held(), is.Abandoned(); held != 1 || abandoned != 0 {
		t.Fatalf("the token whose key is cached was verified after the fetch ended (key server holding %d, given up on %d): it waited for the fetch", held, abandoned)
	}
	select {
	case err := <-rotated:
		t.Fatalf("the token of the new key was answered before the fetch it waits for ended: %v", err)
	default:
	}

	release()
	testwait.Until(t, "the token of the new key to be answered", func() bool {
		select {
		case err = <-rotated:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("the token of a key the fetched set lacks: %v, want a refusal", err)
	}
	if n := is.Requests(); n != 4 {
		t.Fatalf("%d requests to the key server, want 4 (discovery and key set, twice)", n)
	}
}

// TestJWTKeyFetchTimeout: a key server that never answers is given up on after the fetch timeout. The
// issuer's keys were never fetched, so its token is an error (503), not a refusal; it is answered
// while the key server still holds the fetch, and the next token is answered without another fetch
// (the failure is throttled). Nothing waits for the timeout to pass in any given time: the key server
// holds every answer until the test ends, so the fetch ends by the timeout alone.
func TestJWTKeyFetchTimeout(t *testing.T) {
	is := workloadtest.New(t)
	hold := make(chan struct{})
	t.Cleanup(sync.OnceFunc(func() { close(hold) })) // before the issuer's server closes
	is.SetFault(workloadtest.Fault{Hold: hold})
	clock := &testClock{t: time.Now()}
	v := discoveryVerifier(t, is, clock, 100*time.Millisecond)
	state := func() (failures int, fetching bool) {
		c := v.issuers[0]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.failures, c.inflight != nil
	}
	token := is.Sign(t, workloadtest.KidRSA, is.KubernetesClaims("shop", "orders", "gantry", clock.now(), time.Hour))
	for try := 1; try <= 2; try++ {
		if _, err := v.Verify(context.Background(), token); err == nil || errors.Is(err, ErrRefused) {
			t.Fatalf("try %d, the key server hanging: %v, want an error that is not a refusal", try, err)
		}
		if failures, fetching := state(); failures != 1 || fetching {
			t.Fatalf("try %d: %d failed fetches, one in flight %v; want the one that timed out and none since", try, failures, fetching)
		}
	}
}
