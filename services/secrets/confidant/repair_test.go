package confidant_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// TestALaterRunWithTheArchiveTableRepairsTheServiceHistory is issue 41's first case: a run without
// DYNAMODB_TABLE_ARCHIVE writes service batch's revision 1 without the archived credential it
// mapped (reported); a run with the setting, as the report advises, must put the mapping back into
// that revision, and no run may say "passed" while gantry's revision lacks it.
func TestALaterRunWithTheArchiveTableRepairsTheServiceHistory(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	old := e.retired(t, "old", ids[0])
	if rep, text := e.run(t, ctx, confidant.Options{}); !rep.OK() || !strings.Contains(text, "set it to import them into gantry's archive") {
		t.Fatalf("run without the archive table:\n%s", text)
	}
	for run := 2; run <= 4; run++ {
		rep, text := e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable})
		if !rep.OK() || rep.Verification != "passed" {
			t.Fatalf("run %d with the archive table:\n%s", run, text)
		}
		if run == 2 && (rep.Services.Repaired != 1 || !strings.Contains(text, "1 repaired")) {
			t.Fatalf("run 2 does not say it repaired batch revision 1:\n%s", text)
		}
		if run > 2 && !rep.NothingToDo() {
			t.Fatalf("run %d finds work left:\n%s", run, text)
		}
		if svc, err := e.store.GetServiceRevision(ctx, "batch", 1); err != nil || !slices.Contains(svc.Credentials, old) {
			t.Fatalf("run %d: batch revision 1 lacks the archived credential: %+v, %v", run, svc, err)
		}
		if _, _, err := e.importer.ArchivedCredential(ctx, old); err != nil {
			t.Fatalf("run %d: the credential is not in gantry's archive: %v", run, err)
		}
	}
}

// TestARepairedItemImportsAndRepairsTheServices is issue 41's second case: a credential whose
// current item is damaged is in Confidant's table, so the services mapping it fail with it (they
// were written without it, as if it had vanished, and every later run then failed "credentials
// differ" while the report said a re-run continues). Once the item is repaired in Confidant's table
// the next run imports it and the services, and a gantry written by an earlier import without the
// mapping is repaired.
func TestARepairedItemImportsAndRepairsTheServices(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	slack := ids[1] // mapped by web-production revisions 2 and 3
	saved := e.dynamo.Get(tableName, slack)
	e.dynamo.Edit(tableName, slack, func(it dynamotest.Item) { it["modified_date"] = map[string]any{"S": "not a date"} })
	rep, text := e.run(t, ctx, confidant.Options{})
	if rep.OK() || rep.Verification == "passed" ||
		!strings.Contains(text, "service web-production revision 2: maps credentials that are not imported: "+slack) ||
		strings.Contains(text, "no longer in Confidant's table") ||
		!strings.Contains(text, "running the import again alone changes nothing") {
		t.Fatalf("run with a damaged item:\n%s", text)
	}
	e.dynamo.Put(tableName, saved)
	rep, text = e.run(t, ctx, confidant.Options{})
	if !rep.OK() || rep.Verification != "passed" {
		t.Fatalf("run after the repair:\n%s", text)
	}
	e.checkStored(t)

	// A gantry that an earlier import left without the mapping (revisions 2 and 3 written as if the
	// credential had vanished) is repaired by the next run.
	e2 := newEnv(t, newBolt(t))
	e2.dynamo, e2.table, e2.scanner, e2.source = e.dynamo, e.table, e.scanner, e.source
	for rev := range e.table.Services["web-production"] {
		want := e.table.Services["web-production"][rev]
		got, err := e.store.GetServiceRevision(ctx, "web-production", int32(want.Revision))
		if err != nil {
			t.Fatal(err)
		}
		got.Credentials = slices.DeleteFunc(got.Credentials, func(id string) bool { return id == slack })
		if rev == 0 {
			for _, c := range []string{ids[0], ids[1], ids[2]} {
				copyCredential(t, e, e2, c)
			}
		}
		if err := e2.importer.PutServiceRevision(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	rep, text = e2.run(t, ctx, confidant.Options{})
	if !rep.OK() || rep.Verification != "passed" || rep.Services.Repaired != 2 {
		t.Fatalf("run over a gantry without the mapping:\n%s", text)
	}
	e2.checkStored(t)
}

// copyCredential writes every revision of credential id that from holds into to's gantry.
func copyCredential(t *testing.T, from, to *env, id string) {
	t.Helper()
	ctx := context.Background()
	for rev := int32(1); ; rev++ {
		rec, pairs, err := from.importer.CredentialRevision(ctx, id, rev)
		if errors.Is(err, store.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := to.importer.PutCredentialRevision(ctx, rec, pairs); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKMSAccessDeniedIsNotAnOutage: AWS KMS refusing the import's identity is said as such, with
// the grant to make, and not as the key service being unavailable (issue 41 item 3); an outage is a
// failure the next run may not meet, and says so.
func TestKMSAccessDeniedIsNotAnOutage(t *testing.T) {
	e := newEnv(t, newBolt(t))
	e.seed(t)
	e.kmsFake.FailNext(1000, http.StatusBadRequest, "AccessDeniedException")
	rep, text := e.run(t, context.Background(), confidant.Options{Workers: 1})
	if rep.OK() || strings.Contains(text, "unavailable") || strings.Contains(text, "[run again]") ||
		!strings.Contains(text, "AWS KMS denied access to decrypt the data key") || !strings.Contains(text, "grant the identity the import runs as kms:Decrypt on Confidant's master key") ||
		!strings.Contains(text, "running the import again alone changes nothing") {
		t.Fatalf("access denied:\n%s", text)
	}
	e.kmsFake.FailNext(1000, http.StatusServiceUnavailable, "ServiceUnavailableException")
	rep, text = e.run(t, context.Background(), confidant.Options{Workers: 1})
	if rep.OK() || !strings.Contains(text, "KMS did not answer") || !strings.Contains(text, "[run again]") ||
		!strings.Contains(text, "run the import again, it continues where it stopped") {
		t.Fatalf("KMS unavailable:\n%s", text)
	}
	e.kmsFake.FailNext(0, 0, "")
	if rep, text = e.run(t, context.Background(), confidant.Options{}); !rep.OK() {
		t.Fatalf("run once KMS answers:\n%s", text)
	}
}
