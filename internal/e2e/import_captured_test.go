package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// TestImportedCapturedConfidantReadsAsConfidant: the tables the real Confidant 7.0.0 wrote
// (services/secrets/confidant/testdata), archive table included, imported into a stopped stack's
// data folder, then read through the gateway as Confidant's clients read them: every credential with
// its id, name, revision, date and the pairs Confidant's own models decrypt, its revisions, every
// service with its mappings and pairs (get_service as the service), service history that named an
// archived credential, and archived credentials gone from the current ones as in Confidant.
func TestImportedCapturedConfidantReadsAsConfidant(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	ctx := context.Background()
	kmsFake := kmstest.NewServer()
	t.Cleanup(kmsFake.Close)
	dynamo := dynamotest.NewServer()
	t.Cleanup(dynamo.Close)
	want, err := confidanttest.LoadCaptured(dynamo, kmsFake)
	if err != nil {
		t.Fatal(err)
	}
	source, err := kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}

	s := startStack(t, nil)
	s.stop()
	cfg := s.cfg
	cfg.Import.Table, cfg.Import.ArchiveTable = confidanttest.CapturedTable, confidanttest.CapturedArchiveTable
	importer, closeStore, err := stack.OpenImporter(ctx, cfg, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	client, err := confidant.NewDynamoDB(ctx, confidant.Config{URL: dynamo.URL()}, kmstest.Region)
	if err != nil {
		closeStore()
		t.Fatal(err)
	}
	rep, err := confidant.Run(ctx, client, source, importer, confidant.Options{Table: cfg.Import.Table, ArchiveTable: cfg.Import.ArchiveTable, Workers: 2})
	closeStore()
	if err != nil || !rep.OK() {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("import: %v\n%s", err, b.String())
	}

	s = runStack(t, s.cfg)
	user := pythonClientHeaders(s.asUser)
	current := map[string]map[string]string{} // credential id → its current pairs, as gantry serves them
	for id, c := range want.Credentials {
		if c.Archived {
			// Confidant no longer serves an archived credential (404): neither does gantry.
			s.do("GET", s.rest+"/v1/credentials/"+id, "", user).must(t, 404)
			continue
		}
		got := s.do("GET", s.rest+"/v1/credentials/"+id, "", user).must(t, 200)
		last := c.Revisions[fmt.Sprint(c.Revision)]
		// gantry dates a revision as its archive item does (the current item is milliseconds later).
		item := dynamo.Get(confidanttest.CapturedTable, fmt.Sprintf("%s-%d", id, c.Revision))
		date, err := time.Parse("2006-01-02T15:04:05.000000-0700", item["modified_date"]["S"].(string))
		if err != nil {
			t.Fatal(err)
		}
		pairs := stringMap(t, got["credential_pairs"])
		if got["id"] != id || got["name"] != c.Name || got["revision"] != float64(c.Revision) || got["enabled"] != last.Enabled ||
			got["modified_by"] != last.ModifiedBy || got["modified_date"] != date.UTC().Format("2006-01-02T15:04:05.000000+00:00") ||
			!maps.Equal(pairs, capturedPairs(last.Pairs)) {
			t.Errorf("credential %s (%s): got %v, want revision %d by %s of %s with Confidant's pairs", id, c.Name, got, c.Revision, last.ModifiedBy, date)
		}
		current[id] = pairs
		revs := asList(t, s.do("GET", s.rest+"/v1/archive/credentials/"+id, "", user).must(t, 200)["revisions"])
		if len(revs) != c.Revision {
			t.Fatalf("credential %s: %d revisions, want %d", id, len(revs), c.Revision)
		}
		for _, r := range revs {
			rev := asMap(t, r)
			w := c.Revisions[fmt.Sprint(rev["revision"])]
			if rev["name"] != w.Name || rev["enabled"] != w.Enabled || rev["modified_by"] != w.ModifiedBy {
				t.Errorf("credential %s revision %v: %v, want %+v", id, rev["revision"], rev, w)
			}
		}
	}
	for id, svcWant := range want.Services {
		if !svcWant.Enabled {
			continue // a disabled service cannot authenticate; read below as a user
		}
		if svcWant.Account != nil {
			// Scoped to an account (web-production: sandbox): as in Confidant, only a token of that
			// account's key reads it (401 otherwise); the diff of its last two revisions shows it.
			s.do("GET", s.rest+"/v1/services/"+id+"?metadata_only=False", "", pythonClientHeaders(s.basic(id, "service"))).must(t, 401)
			diff := s.do("GET", s.rest+fmt.Sprintf("/v1/services/%s/%d/%d", id, svcWant.Revision-1, svcWant.Revision), "", user).must(t, 200)
			added := fmt.Sprint(asMap(t, diff["credentials"])["added"])
			if added != "["+stripeID(want)+"]" || asMap(t, diff["account"])["added"] != *svcWant.Account {
				t.Errorf("service %s: diff of its last two revisions %v", id, diff)
			}
			continue
		}
		svc := s.do("GET", s.rest+"/v1/services/"+id+"?metadata_only=False", "", pythonClientHeaders(s.basic(id, "service"))).must(t, 200)
		checkClientService(t, svc, true)
		var ids []string
		for _, c := range asList(t, svc["credentials"]) {
			cred := asMap(t, c)
			cid := cred["id"].(string)
			ids = append(ids, cid)
			if !maps.Equal(stringMap(t, cred["credential_pairs"]), current[cid]) {
				t.Errorf("get_service %s: credential %s pairs differ from Confidant's", id, cid)
			}
		}
		slices.Sort(ids)
		if svc["revision"] != float64(svcWant.Revision) || !slices.Equal(ids, svcWant.Credentials) || (svcWant.Account != nil) != (svc["account"] != nil) {
			t.Errorf("get_service %s: revision %v credentials %v account %v; want %+v", id, svc["revision"], ids, svc["account"], svcWant)
		}
	}
	// Every earlier revision holds Confidant's pairs: reverting to it (PUT /v1/credentials/<id>/<k>,
	// a new revision with its pairs) serves them.
	reverted := 0
	for id, c := range want.Credentials {
		if c.Archived {
			continue
		}
		for k := 1; k < c.Revision; k++ {
			resp := s.do("PUT", s.rest+fmt.Sprintf("/v1/credentials/%s/%d", id, k), "", user)
			if resp.code == 400 && strings.Contains(string(resp.body), "No difference") {
				continue // the revision equals the current one
			}
			resp.must(t, 200)
			got := s.do("GET", s.rest+"/v1/credentials/"+id, "", user).must(t, 200)
			if !maps.Equal(stringMap(t, got["credential_pairs"]), capturedPairs(c.Revisions[fmt.Sprint(k)].Pairs)) {
				t.Errorf("credential %s reverted to revision %d: pairs differ from Confidant's", id, k)
			}
			reverted++
		}
	}
	if reverted < 4 { // db to 1, 2 and 3, stripe to 2 at least
		t.Errorf("%d revisions reverted to, want at least 4", reverted)
	}
	// gantry's archive lists the credentials of Confidant's archive table, each with the archive_date
	// Confidant gave it.
	archivedSeen := 0
	for _, a := range asList(t, s.do("GET", s.rest+"/v1/archived_credentials", "", user).must(t, 200)["credentials"]) {
		entry := asMap(t, a)
		cred := asMap(t, entry["credential"])
		id := fmt.Sprint(cred["id"])
		c, ok := want.Credentials[id]
		if !ok || !c.Archived {
			t.Errorf("archived_credentials lists %s, not archived in Confidant", id)
			continue
		}
		item := dynamo.Get(confidanttest.CapturedArchiveTable, id)
		wantAt, err := time.Parse("2006-01-02T15:04:05.000000-0700", item["archive_date"]["S"].(string))
		if err != nil {
			t.Fatal(err)
		}
		gotAt, err := time.Parse(time.RFC3339Nano, fmt.Sprint(entry["archived_date"]))
		if err != nil || !gotAt.Equal(wantAt) || cred["name"] != c.Name || cred["revision"] != float64(c.Revision) {
			t.Errorf("archived credential %s: %v archived %v (%v), want %s revision %d archived %s", id, cred, entry["archived_date"], err, c.Name, c.Revision, wantAt)
		}
		archivedSeen++
	}
	if archivedSeen != 2 {
		t.Errorf("archived_credentials lists %d of Confidant's 2 archived credentials", archivedSeen)
	}
	mailer := s.do("GET", s.rest+"/v1/services/mailer", "", user).must(t, 200)
	if mailer["enabled"] != false || mailer["revision"] != float64(1) {
		t.Errorf("service mailer: %v", mailer)
	}
	// Service history keeps the ids of the credentials archived since: Confidant's diff of revisions
	// 1 and 2 shows each removed.
	for svc, archivedName := range map[string]string{"web-production": "old-ftp", "payments-api-v2": "old-ldap"} {
		diff := s.do("GET", s.rest+"/v1/services/"+svc+"/1/2", "", user).must(t, 200)
		removed := fmt.Sprint(asMap(t, diff["credentials"])["removed"])
		if !strings.Contains(removed, idOf(want, archivedName)) {
			t.Errorf("service %s: the diff of revisions 1 and 2 removes %s, want %s (%s, archived since)", svc, removed, idOf(want, archivedName), archivedName)
		}
	}
}

func idOf(want *confidanttest.Captured, name string) string {
	for id, c := range want.Credentials {
		if c.Name == name {
			return id
		}
	}
	return "(no credential " + name + ")"
}

func stripeID(want *confidanttest.Captured) string { return idOf(want, "stripe") }

func stringMap(t *testing.T, v any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, x := range asMap(t, v) {
		out[k] = fmt.Sprint(x)
	}
	return out
}

// capturedPairs are Confidant's decrypted pairs as gantry serves them: every value a string.
func capturedPairs(p map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		out[k] = fmt.Sprint(v)
	}
	return out
}
