package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// uiBenchCredentials is how many credentials the web UI's list must stay fast with (issue 18).
const uiBenchCredentials = 100_000

// seedCredentials writes n listing-only credentials straight into the stopped stack's store (the API
// would take hours at the write rate limit; listings never decrypt, so the fixtures' sealed bytes do)
// and returns the restarted stack.
func seedCredentials(b *testing.B, s *testStack, n int) *testStack {
	b.Helper()
	s.stop()
	store, err := boltstore.Open(filepath.Join(s.cfg.DataDir, "secrets.db"), boltdb.Options{Timeout: time.Second, NoSync: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		if err := store.PutCredential(ctx, storetest.NewCred(fmt.Sprintf("id-%06d", i), fmt.Sprintf("svc-%06d-db", i), 1), 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		b.Fatal(err)
	}
	return s.restart()
}

// BenchmarkUICredentialList measures what the credentials page asks the server for with 100k
// credentials: the first page, a later page and a name search (50 rows each), through the gateway.
func BenchmarkUICredentialList(b *testing.B) {
	s := seedCredentials(b, startStack(b, nil), uiBenchCredentials)
	first := s.get("/v1/credentials?limit=50").must(b, http.StatusOK)
	next, _ := first["next_page"].(string)
	for _, bc := range []struct{ name, path string }{
		{"first page", "/v1/credentials?limit=50"},
		{"next page", "/v1/credentials?limit=50&next_page=" + next},
		{"name search", "/v1/credentials?limit=50&name_prefix=SVC-0731"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if got := len(s.get(bc.path).must(b, http.StatusOK)["credentials"].([]any)); got == 0 {
				b.Fatalf("%s listed nothing", bc.path)
			}
			b.ResetTimer()
			for b.Loop() {
				if r := s.get(bc.path); r.code != http.StatusOK {
					b.Fatalf("%d %s", r.code, r.body)
				}
			}
		})
	}
}
