package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// TestImportedConfidantReadsAsConfidant: a Confidant table (credentials with history, services whose
// mappings changed, a blind credential) imported into a stopped stack's data folder, then read through
// the gateway with the requests python-confidant-client sends: get_service as the service itself
// (kmsauth, metadata_only=False) returns the same ids, revisions and decrypted pairs as Confidant.
func TestImportedConfidantReadsAsConfidant(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	ctx := context.Background()
	kmsFake := kmstest.NewServer()
	t.Cleanup(kmsFake.Close)
	kmsFake.CreateKey("alias/confidant-production")
	dynamo := dynamotest.NewServer()
	t.Cleanup(dynamo.Close)
	source, err := kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := confidanttest.NewTable(dynamo, "confidant", source, "alias/confidant-production")
	db, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "db", Pairs: map[string]string{"db_user": "app", "db_password": "one"}, Enabled: true, Metadata: map[string]string{"env_var_prefix": "DB_"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.UpdateCredential(ctx, db, func(c *confidanttest.Credential) { c.Pairs["db_password"] = "two" }); err != nil {
		t.Fatal(err)
	}
	cache, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "cache", Pairs: map[string]string{"redis_url": "redis://cache"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	blind := table.CreateBlindCredential("legacy")
	table.PutService("api", []string{db}, nil, nil)
	table.PutService("api", []string{db, cache}, []string{blind}, nil)

	// A stack creates its data folder (keyring, key check), stops, and the import writes into it as
	// `gantry import confidant` does: the store and keys opened as serve opens them.
	s := startStack(t, nil)
	s.stop()
	cfg := s.cfg
	cfg.Import.Table = "confidant"
	importer, closeStore, err := stack.OpenImporter(ctx, cfg, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	client, err := confidant.NewDynamoDB(ctx, confidant.Config{URL: dynamo.URL()}, kmstest.Region)
	if err != nil {
		closeStore()
		t.Fatal(err)
	}
	rep, err := confidant.Run(ctx, client, source, importer, confidant.Options{Table: "confidant", Workers: 2})
	closeStore()
	if err != nil || !rep.OK() {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("import: %v\n%s", err, b.String())
	}

	s = runStack(t, s.cfg)
	service := pythonClientHeaders(s.basic("api", "service"))
	svc := s.do("GET", s.rest+"/v1/services/api?metadata_only=False", "", service).must(t, 200)
	checkClientService(t, svc, true)
	if svc["id"] != "api" || svc["revision"] != float64(2) || svc["modified_by"] != "bob@example.com" {
		t.Errorf("service: id %v revision %v modified_by %v", svc["id"], svc["revision"], svc["modified_by"])
	}
	got := map[string]string{}
	for _, c := range svc["credentials"].([]any) {
		cred := asMap(t, c)
		got[cred["id"].(string)] = fmt.Sprint(cred["revision"], cred["credential_pairs"])
	}
	want := map[string]string{db: "2 map[db_password:two db_user:app]", cache: "1 map[redis_url:redis://cache]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("get_service credentials = %v, want %v", got, want)
	}
	// The same credential's history, as a user reads it: revision 1 keeps its own pairs and date.
	user := pythonClientHeaders(s.asUser)
	cur := s.do("GET", s.rest+"/v1/credentials/"+db, "", user).must(t, 200)
	wantDate := table.Credentials[db][1].ModifiedDate.Format("2006-01-02T15:04:05.000000+00:00")
	if cur["revision"] != float64(2) || cur["modified_date"] != wantDate || cur["name"] != "db" {
		t.Errorf("credential: revision %v modified_date %v (want %s) name %v", cur["revision"], cur["modified_date"], wantDate, cur["name"])
	}
	diff := s.do("GET", s.rest+fmt.Sprintf("/v1/credentials/%s/1/2", db), "", user).must(t, 200)
	if !strings.Contains(fmt.Sprint(diff["credential_pairs"]), "db_password") {
		t.Errorf("diff of revisions 1 and 2 = %v", diff)
	}
	// Confidant's service history: revision 1 mapped db alone.
	r1 := s.do(http.MethodGet, s.rest+"/v1/services/api/1/2", "", user).must(t, 200)
	if !strings.Contains(fmt.Sprint(r1["credentials"]), cache) {
		t.Errorf("service diff 1→2 = %v, want %s added", r1, cache)
	}
}
