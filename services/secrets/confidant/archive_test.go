package confidant_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

const archiveTable = "confidant-production-archive"

// retired writes a credential that Confidant's archive script would take (created, then disabled),
// mapped by service "batch" in its first revision only, and archives it.
func (e *env) retired(t *testing.T, name string, keep string) string {
	t.Helper()
	ctx := context.Background()
	id, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: name, Pairs: map[string]string{"k": "retired-secret"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.table.UpdateCredential(ctx, id, func(c *confidanttest.Credential) { c.Enabled = false }); err != nil {
		t.Fatal(err)
	}
	e.table.PutService("batch", []string{keep, id}, nil, nil)
	e.table.PutService("batch", []string{keep}, nil, nil)
	e.table.ArchiveCredentials(archiveTable, id)
	return id
}

// TestArchiveTableWithoutTheSetting: without DYNAMODB_TABLE_ARCHIVE the archived credential is not
// imported, and the service history that named it says which setting brings it.
func TestArchiveTableWithoutTheSetting(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	e.retired(t, "old", ids[0])
	rep, text := e.run(t, context.Background(), confidant.Options{})
	if !rep.OK() || !strings.Contains(text, "set it to import them into gantry's archive") || strings.Contains(text, "archived:  ") {
		t.Fatalf("import:\n%s", text)
	}
}

// TestArchivedCredentialsNameTakenLater: Confidant let a new credential take an archived one's name;
// gantry refuses a name a current credential holds, so the archived one goes to the archive before
// the new one is written; the service revision that named it is written without it (the store maps
// current credentials only), then, once a later revision makes it history, repaired to name it.
func TestArchivedCredentialsNameTakenLater(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	old := e.retired(t, "reused", ids[0])
	reborn, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "reused", Pairs: map[string]string{"k": "new"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, text := e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable})
	if !rep.OK() || rep.ArchivedCredentials.Archived != 1 || rep.ArchivedCredentials.Verified != 2 || rep.Services.Repaired != 1 {
		t.Fatalf("import:\n%s", text)
	}
	if got, _, err := e.importer.ArchivedCredential(ctx, old); err != nil || got.Name != "reused" || got.Revision != 2 {
		t.Fatalf("archived: %+v, %v", got, err)
	}
	if cur, err := e.store.GetCredential(ctx, reborn); err != nil || cur.Name != "reused" {
		t.Fatalf("the new credential: %+v, %v", cur, err)
	}
	if svc, err := e.store.GetServiceRevision(ctx, "batch", 1); err != nil || !slices.Equal(sorted(svc.Credentials), sorted([]string{ids[0], old})) {
		t.Fatalf("batch revision 1: %+v, %v", svc, err)
	}
	rep, text = e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable})
	if !rep.OK() || !rep.NothingToDo() {
		t.Fatalf("second run:\n%s", text)
	}
}

// TestArchivedCredentialWaitsForItsServices: while a service whose history names an archived
// credential fails to import, the credential stays current (archiving it would make that history
// impossible to write), reported; once the service imports, the next run archives it.
func TestArchivedCredentialWaitsForItsServices(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	old := e.retired(t, "old", ids[0])
	// The credential batch maps breaks (its data key is another's): batch fails with it.
	saved := []dynamotest.Item{e.dynamo.Get(tableName, ids[0]), e.dynamo.Get(tableName, ids[0]+"-1")}
	swapDataKey(t, e, ids[0], ids[1])
	rep, text := e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable})
	if rep.OK() || rep.ArchivedCredentials.Archived != 0 || !strings.Contains(text, "archived-credential "+old) ||
		!strings.Contains(text, "kept current, not moved to gantry's archive: the history of services batch names it") {
		t.Fatalf("import with a failing service:\n%s", text)
	}
	if _, err := e.store.GetCredential(ctx, old); err != nil {
		t.Fatalf("the archived credential is not kept current: %v", err)
	}
	for _, it := range saved {
		e.dynamo.Put(tableName, it)
	}
	rep, text = e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable})
	if !rep.OK() || rep.ArchivedCredentials.Archived != 1 {
		t.Fatalf("run after the repair:\n%s", text)
	}
	if _, _, err := e.importer.ArchivedCredential(ctx, old); err != nil {
		t.Fatal(err)
	}
	if svc, err := e.store.GetServiceRevision(ctx, "batch", 1); err != nil || !slices.Contains(svc.Credentials, old) {
		t.Fatalf("batch revision 1 lost the archived id: %+v, %v", svc, err)
	}
}

// TestCredentialInBothTables: a credential Confidant still holds in its table (an archive whose
// delete failed) is imported from there, current, and reported.
func TestCredentialInBothTables(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	e.table.ArchiveCredentials(archiveTable)
	for _, key := range []string{ids[1], ids[1] + "-1"} {
		it := e.dynamo.Get(tableName, key)
		it["archive_date"] = map[string]any{"S": "2024-05-01T00:00:00.000000+0000"}
		e.dynamo.Put(archiveTable, it)
	}
	rep, text := e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable})
	if !rep.OK() || rep.ArchivedCredentials.Archived != 0 || !strings.Contains(text, "in both DYNAMODB_TABLE and DYNAMODB_TABLE_ARCHIVE") {
		t.Fatalf("import:\n%s", text)
	}
	if _, err := e.store.GetCredential(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
}

// TestInterruptedArchiveImportContinues: a run interrupted after any write continues on the next
// run, which ends with the archived credential in gantry's archive and the history naming it whole.
func TestInterruptedArchiveImportContinues(t *testing.T) {
	for stop := 1; stop <= 14; stop++ { // every write of the run: 8 credential and 6 service revisions
		e := newEnv(t, newBolt(t))
		ids, _ := e.seed(t)
		old := e.retired(t, "old", ids[0])
		ctx, cancel := context.WithCancel(context.Background())
		writes := 0
		rep, text := e.run(t, ctx, confidant.Options{ArchiveTable: archiveTable, Workers: 1, OnWrite: func(string, string, int32) {
			if writes++; writes == stop {
				cancel()
			}
		}})
		cancel()
		if rep.OK() || !rep.Interrupted || rep.ArchivedCredentials.Archived != 0 {
			t.Fatalf("interrupted after write %d:\n%s", stop, text)
		}
		rep, text = e.run(t, context.Background(), confidant.Options{ArchiveTable: archiveTable})
		if !rep.OK() || rep.ArchivedCredentials.Archived != 1 || rep.ArchivedCredentials.Written+rep.ArchivedCredentials.Unchanged != 2 {
			t.Fatalf("the run after an interruption at write %d:\n%s", stop, text)
		}
		if _, _, err := e.importer.ArchivedCredential(context.Background(), old); err != nil {
			t.Fatalf("interrupted at write %d: %v", stop, err)
		}
		if svc, err := e.store.GetServiceRevision(context.Background(), "batch", 1); err != nil || !slices.Contains(svc.Credentials, old) {
			t.Fatalf("interrupted at write %d: batch revision 1 = %+v, %v", stop, svc, err)
		}
	}
}

// TestHistoryProblemsAreReportedForEveryKind: a record without its current item, one missing a
// revision, and an archive item after the current revision (a Confidant write that did not finish)
// are reported one by one, for credentials and services alike, never dropped silently.
func TestHistoryProblemsAreReportedForEveryKind(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	newCred := func(name string) string {
		id, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: name, Pairs: map[string]string{"k": name}, Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.table.UpdateCredential(ctx, id, func(c *confidanttest.Credential) { c.Pairs["k"] += "2" }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	half, orphan, ahead := newCred("half"), newCred("orphan"), newCred("ahead")
	e.dynamo.Delete(tableName, half+"-1")
	e.dynamo.Delete(tableName, orphan)
	e.dynamo.Edit(tableName, ahead+"-2", func(it dynamotest.Item) {
		it["id"], it["revision"] = map[string]any{"S": ahead + "-3"}, map[string]any{"N": "3"}
		e.dynamo.Put(tableName, it)
	})
	for _, svc := range []string{"svc-half", "svc-orphan", "svc-ahead"} {
		e.table.PutService(svc, []string{ids[0]}, nil, nil)
		e.table.PutService(svc, []string{ids[0], ids[1]}, nil, nil)
	}
	e.dynamo.Delete(tableName, "svc-half-1")
	e.dynamo.Delete(tableName, "svc-orphan")
	e.dynamo.Edit(tableName, "svc-ahead-2", func(it dynamotest.Item) {
		it["id"], it["revision"] = map[string]any{"S": "svc-ahead-3"}, map[string]any{"N": "3"}
		e.dynamo.Put(tableName, it)
	})
	rep, text := e.run(t, ctx, confidant.Options{})
	for _, w := range []string{
		"credential " + half + " revision 1 (\"half\"): this revision is missing from Confidant's table",
		"credential " + orphan + ": 2 archive revisions but no current record",
		"credential " + ahead + " revision 3 (\"ahead\"): archive revision after the current revision 2",
		"service svc-half revision 1: this revision is missing from Confidant's table",
		"service svc-orphan: 2 archive revisions but no current record",
		"service svc-ahead revision 3: archive revision after the current revision 2",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("report lacks %q", w)
		}
	}
	if rep.OK() || rep.Credentials.Failed != 1 || rep.Services.Failed != 1 || rep.Credentials.Skipped != 2 || rep.Services.Skipped != 2 {
		t.Errorf("counts: credentials %+v services %+v\n%s", rep.Credentials, rep.Services, text)
	}
}
