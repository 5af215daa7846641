package confidanttest_test

import (
	"context"
	"encoding/base64"
	"reflect"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// shape is an item's attributes with their DynamoDB types ("name:S").
func shape(it dynamotest.Item) []string {
	var out []string
	for name, v := range it {
		for typ := range v {
			out = append(out, name+":"+typ)
		}
	}
	slices.Sort(out)
	return out
}

func byName(t *testing.T, srv *dynamotest.Server, table, name, dataType string, revision string) dynamotest.Item {
	t.Helper()
	for _, id := range srv.Keys(table) {
		it := srv.Get(table, id)
		if it["name"]["S"] == name && it["data_type"]["S"] == dataType && it["revision"]["N"] == revision {
			return it
		}
	}
	t.Fatalf("no %s item %q revision %s in %s", dataType, name, revision, table)
	return nil
}

// TestGeneratorWritesWhatConfidantWrites compares the generator's items with the ones the real
// Confidant wrote (testdata), attribute by attribute: the same attributes with the same types for
// the same inputs, and the encodings a reading of the models does not show.
func TestGeneratorWritesWhatConfidantWrites(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	ctx := context.Background()
	captured, kmsFake := dynamotest.NewServer(), kmstest.NewServer()
	t.Cleanup(captured.Close)
	t.Cleanup(kmsFake.Close)
	if _, err := confidanttest.LoadCaptured(captured, kmsFake); err != nil {
		t.Fatal(err)
	}
	gen := dynamotest.NewServer()
	t.Cleanup(gen.Close)
	kmsFake.CreateKey("alias/generated")
	provider, err := kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := confidanttest.NewTable(gen, "generated", provider, "alias/generated")
	doc := "rotate via the runbook"
	db, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "db", Pairs: map[string]string{"user": "app", "password": "x"},
		Metadata: map[string]string{"owner": "team-a"}, Tags: []string{"FINANCIALLY_SENSITIVE"}, Documentation: &doc, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "slack", Pairs: map[string]string{"token": "x"}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	blind := table.CreateBlindCredential("legacy-blind")
	account := "sandbox"
	table.PutService("web-production", []string{db}, []string{blind}, &account)
	table.PutService("payments-api-v2", []string{db}, nil, nil)

	for _, c := range []struct {
		name, dataType, revision string
		table                    string
	}{
		{"db", "archive-credential", "1", confidanttest.CapturedTable},
		{"slack", "credential", "1", confidanttest.CapturedTable},
		{"slack", "archive-credential", "1", confidanttest.CapturedTable},
		{"legacy-blind", "blind-credential", "1", confidanttest.CapturedTable},
		{"legacy-blind", "archive-blind-credential", "1", confidanttest.CapturedTable},
	} {
		want := shape(byName(t, captured, c.table, c.name, c.dataType, c.revision))
		got := shape(byName(t, gen, "generated", c.name, c.dataType, c.revision))
		if !slices.Equal(got, want) {
			t.Errorf("%s %s: generated attributes\n %v\nConfidant's\n %v", c.dataType, c.name, got, want)
		}
	}
	for _, c := range []struct{ captured, generated string }{
		{"web-production-3", "web-production-1"}, // account, credentials and blind credentials
		{"payments-api-v2-2", "payments-api-v2-1"},
		{"web-production", "web-production"},
	} {
		want, got := shape(captured.Get(confidanttest.CapturedTable, c.captured)), shape(gen.Get("generated", c.generated))
		if !slices.Equal(got, want) {
			t.Errorf("service item %s: generated attributes\n %v\nConfidant's (%s)\n %v", c.generated, got, c.captured, want)
		}
	}

	// Encodings: data_key holds the base64 text of the KMS ciphertext (PynamoDB 5's BinaryAttribute);
	// metadata is Python's json.dumps; the current item is built after its archive twin.
	for name, it := range map[string]dynamotest.Item{
		"Confidant's": byName(t, captured, confidanttest.CapturedTable, "db", "archive-credential", "1"),
		"generated":   byName(t, gen, "generated", "db", "archive-credential", "1"),
	} {
		raw, err := base64.StdEncoding.DecodeString(it["data_key"]["B"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := base64.StdEncoding.Strict().DecodeString(string(raw)); err != nil {
			t.Errorf("%s data_key is not the base64 text of the ciphertext: %q...", name, raw[:8])
		}
		if got := it["metadata"]["S"]; got != `{"owner": "team-a"}` {
			t.Errorf("%s metadata %q, want json.dumps's %q", name, got, `{"owner": "team-a"}`)
		}
	}
	for name, srv := range map[string]*dynamotest.Server{"Confidant's": captured, "generated": gen} {
		tbl := map[*dynamotest.Server]string{captured: confidanttest.CapturedTable, gen: "generated"}[srv]
		cur := byName(t, srv, tbl, "slack", "credential", "1")
		arch := byName(t, srv, tbl, "slack", "archive-credential", "1")
		if !(cur["modified_date"]["S"].(string) > arch["modified_date"]["S"].(string)) {
			t.Errorf("%s: the current item's modified_date %v is not after its archive item's %v", name, cur["modified_date"], arch["modified_date"])
		}
		for _, k := range []string{"id", "data_type", "modified_date"} {
			delete(cur, k)
			delete(arch, k)
		}
		if !reflect.DeepEqual(cur, arch) {
			t.Errorf("%s: the current item differs from its archive item beyond id, data_type and modified_date:\n%v\n%v", name, cur, arch)
		}
	}
}
