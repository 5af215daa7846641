package confidant_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// TestSkipDamagedImportsWhatIsIntact is issue 41 item 3: one bad old revision kept a credential's
// current value and every service mapping it out, with no way to import the rest. With
// -skip-damaged a damaged revision before the last is recorded in gantry's history as missing, a
// current item that cannot be read is replaced by its last archive item, a credential whose last
// revision is damaged stays out and the services mapping it are imported without it; each is
// listed, and a later run, once the item is repaired, imports it and repairs the services.
func TestSkipDamagedImportsWhatIsIntact(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	db, slack, stripe := ids[0], ids[1], ids[2]
	lost, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "lost", Pairs: map[string]string{"k": "lost-secret"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	e.table.PutService("uses-lost", []string{lost, db}, nil, nil)
	unreadable := func(key string) dynamotest.Item {
		saved := e.dynamo.Get(tableName, key)
		e.dynamo.Edit(tableName, key, func(it dynamotest.Item) { it["modified_date"] = map[string]any{"S": "not a date"} })
		return saved
	}
	unreadable(db + "-1")                                            // an old revision's item
	e.dynamo.Edit(tableName, stripe+"-1", func(it dynamotest.Item) { // an old revision's pairs
		it["credential_pairs"] = map[string]any{"S": "gAAAAAnot-a-fernet-token"}
	})
	unreadable(slack)                                                         // a current item; its archive item slack-1 holds the same revision
	savedLost := []dynamotest.Item{unreadable(lost), unreadable(lost + "-1")} // the last revision

	rep, text := e.run(t, ctx, confidant.Options{})
	if rep.OK() || rep.Services.Written != 0 && rep.Services.Failed == 0 {
		t.Fatalf("without -skip-damaged:\n%s", text)
	}
	for _, want := range []string{"or run with -skip-damaged to record it as missing", "or run with -skip-damaged to import it from its last archive item (revision 1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("without -skip-damaged the report lacks %q:\n%s", want, text)
		}
	}

	e2 := newEnv(t, newBolt(t))
	e2.dynamo, e2.table, e2.scanner, e2.source = e.dynamo, e.table, e.scanner, e.source
	rep, text = e2.run(t, ctx, confidant.Options{SkipDamaged: true})
	if rep.OK() || rep.Credentials.Missing != 2 || !strings.Contains(text, "2 recorded as missing") {
		t.Fatalf("with -skip-damaged:\n%s", text)
	}
	for _, want := range []string{
		"credential " + db + " revision 1 (\"db-main\"): damaged (its item cannot be read",
		"credential " + stripe + " revision 1 (\"stripe\"): damaged (its pairs do not decrypt",
		"credential " + slack + " revision 1 (\"slack\"): its current item cannot be read",
		"service uses-lost revision 1: maps credentials that could not be imported (listed with them), left out of this revision (-skip-damaged)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("with -skip-damaged the report lacks %q:\n%s", want, text)
		}
	}
	// Only the credential of which no item can be read fails; verification fails with it.
	if len(rep.Failures) != 1 || rep.Failures[0].ID != lost || rep.Verification == "passed" {
		t.Errorf("failures: %+v, verification %q\n%s", rep.Failures, rep.Verification, text)
	}
	placeholder, pairs, err := e2.importer.CredentialRevision(ctx, db, 1)
	if err != nil || len(pairs) != 0 || placeholder.ModifiedBy != "gantry import -skip-damaged" || placeholder.Name != "db-main" ||
		placeholder.Documentation == nil || !strings.Contains(*placeholder.Documentation, "recorded it as missing") {
		t.Fatalf("db revision 1 = %+v, %d pairs, %v", placeholder, len(pairs), err)
	}
	if cur, pairs, err := e2.importer.CredentialRevision(ctx, db, 3); err != nil || pairs["password"] != credpair.Str("hunter2-v3") || cur.Name != "db-main" {
		t.Fatalf("db's current revision = %+v, %v", cur, err)
	}
	for svc, want := range map[string][]string{"web-production": {db, slack, stripe}, "worker": {stripe}, "uses-lost": {db}} {
		cur, err := e2.store.GetService(ctx, svc)
		if err != nil || !slices.Equal(sorted(cur.Credentials), sorted(want)) {
			t.Errorf("service %s = %+v, %v; want mappings %v", svc, cur, err, want)
		}
	}

	// The lost credential's items are repaired in Confidant's table: a run without the flag imports
	// it and puts it back into the service that maps it.
	for _, it := range savedLost {
		e.dynamo.Put(tableName, it)
	}
	rep, text = e2.run(t, ctx, confidant.Options{SkipDamaged: true})
	if !rep.OK() || rep.Services.Repaired != 1 || !strings.Contains(text, "verification:      passed (but for 2 damaged revisions recorded as missing") {
		t.Fatalf("after the repair:\n%s", text)
	}
	if cur, err := e2.store.GetService(ctx, "uses-lost"); err != nil || !slices.Equal(sorted(cur.Credentials), sorted([]string{db, lost})) {
		t.Fatalf("uses-lost after the repair = %+v, %v", cur, err)
	}
}
