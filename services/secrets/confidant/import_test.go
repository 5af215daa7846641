package confidant_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

const tableName = "confidant-production"

// env is a Confidant table in the DynamoDB fake, Confidant's AWS KMS (the KMS fake, through gantry's
// AWS provider), and a gantry store with its own local keyring.
type env struct {
	kmsFake  *kmstest.Server
	dynamo   *dynamotest.Server
	table    *confidanttest.Table
	source   kms.Provider
	scanner  *dynamodb.Client
	store    store.Store
	importer *secrets.Importer
}

func newEnv(t testing.TB, store store.Store) *env {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	ctx := context.Background()
	e := &env{kmsFake: kmstest.NewServer(), dynamo: dynamotest.NewServer(), store: store}
	t.Cleanup(e.kmsFake.Close)
	t.Cleanup(e.dynamo.Close)
	master := "alias/confidant-production"
	e.kmsFake.CreateKey(master)
	var err error
	e.source, err = kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: e.kmsFake.URL()}, nil, func(o *awskms.Options) { o.Retryer = awstest.ConnectionRetriesOnly() })
	if err != nil {
		t.Fatal(err)
	}
	e.table = confidanttest.NewTable(e.dynamo, tableName, e.source, master)
	e.scanner = dynamodb.New(dynamodb.Options{
		Region: kmstest.Region, BaseEndpoint: aws.String(e.dynamo.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "example", ""),
		Retryer:     awstest.ConnectionRetriesOnly(),
	})
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.importer = secrets.NewImporter(store, ring, kms.AliasMaster, 64, logtest.New(t))
	return e
}

func newBolt(t testing.TB) store.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "secrets.db"), boltdb.Options{Timeout: time.Second}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newEtcd(t testing.TB) store.Store {
	t.Helper()
	cluster := etcdtest.New(t, 1, logtest.New(t))
	opts := etcdstore.DefaultOptions()
	opts.Endpoints = cluster.Endpoints()
	s, err := etcdstore.Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ptr[T any](v T) *T { return &v }

// seed writes a small installation: three credentials with history (renames, disabling, tags,
// metadata, documentation, rotation dates), two services whose mappings change, a blind credential.
// It returns every secret value it wrote, to check none of them leaks.
func (e *env) seed(t testing.TB) (ids []string, values []string) {
	t.Helper()
	ctx := context.Background()
	rotated := time.Date(2024, 1, 2, 3, 4, 5, 678901000, time.UTC)
	a, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "db", Pairs: map[string]string{"user": "app", "password": "hunter2-v1"},
		Enabled: true, Metadata: map[string]string{"owner": "team-a"}, Tags: []string{"FINANCIALLY_SENSITIVE"}, Documentation: ptr("rotate via the runbook"), LastRotationDate: &rotated})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.table.UpdateCredential(ctx, a, func(c *confidanttest.Credential) {
		c.Pairs["password"] = "hunter2-v2"
		c.Enabled = false
		c.Name = "db-main"
	}))
	must(e.table.UpdateCredential(ctx, a, func(c *confidanttest.Credential) {
		c.Pairs["password"] = "hunter2-v3"
		c.Enabled = true
		c.Tags = append(c.Tags, "PCI")
		c.Metadata["env"] = "prod"
		c.ModifiedBy = "carol@example.com"
	}))
	b, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "slack", Pairs: map[string]string{"token": "xoxb-s3cr3t"}, Enabled: true})
	must(err)
	c, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "stripe", Pairs: map[string]string{"api_key": "sk_live_one"}, Enabled: true})
	must(err)
	must(e.table.UpdateCredential(ctx, c, func(c *confidanttest.Credential) { c.Pairs = map[string]string{"api_key": "sk_live_two"} }))
	blind := e.table.CreateBlindCredential("legacy-blind")
	e.table.PutService("web-production", []string{a}, nil, nil)
	e.table.PutService("web-production", []string{a, b}, []string{blind}, nil)
	e.table.PutService("web-production", []string{a, b, c}, []string{blind}, ptr("123456789012"))
	e.table.PutService("worker", []string{c}, nil, nil)
	return []string{a, b, c}, []string{"hunter2-v1", "hunter2-v2", "hunter2-v3", "xoxb-s3cr3t", "sk_live_one", "sk_live_two"}
}

func (e *env) run(t testing.TB, ctx context.Context, opts confidant.Options) (*confidant.Report, string) {
	t.Helper()
	opts.Table = tableName
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	opts.Logger = logtest.New(t)
	rep, err := confidant.Run(ctx, e.scanner, e.source, e.importer, opts)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	return rep, text.String()
}

// checkStored compares every revision gantry holds with what Confidant wrote.
func (e *env) checkStored(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for id, revs := range e.table.Credentials {
		for _, want := range revs {
			got, pairs, err := e.importer.CredentialRevision(ctx, id, int32(want.Revision))
			if err != nil {
				t.Fatalf("credential %s revision %d: %v", id, want.Revision, err)
			}
			if !maps.Equal(pairs, wantPairs(t, want)) || got.Name != want.Name || got.Enabled != want.Enabled ||
				!maps.Equal(got.Metadata, orEmpty(want.Metadata)) || !slices.Equal(sorted(got.Tags), sorted(want.Tags)) ||
				got.ModifiedBy != want.ModifiedBy || !got.ModifiedDate.Equal(want.ModifiedDate) ||
				(want.Documentation == nil) != (got.Documentation == nil) || (want.Documentation != nil && *got.Documentation != *want.Documentation) ||
				(want.LastRotationDate == nil) != (got.LastRotationDate == nil) || (want.LastRotationDate != nil && !got.LastRotationDate.Equal(*want.LastRotationDate)) {
				t.Errorf("credential %s revision %d differs:\n got %+v\nwant %+v", id, want.Revision, got, want)
			}
		}
		cur, err := e.store.GetCredential(ctx, id)
		if err != nil || int(cur.Revision) != len(revs) {
			t.Errorf("current revision of %s = %v, %v; want %d", id, cur, err, len(revs))
		}
	}
	for id, revs := range e.table.Services {
		for _, want := range revs {
			got, err := e.store.GetServiceRevision(ctx, id, int32(want.Revision))
			if err != nil {
				t.Fatalf("service %s revision %d: %v", id, want.Revision, err)
			}
			if !slices.Equal(sorted(got.Credentials), sorted(want.Credentials)) || !slices.Equal(sorted(got.BlindCredentials), sorted(want.BlindCredentials)) ||
				got.Enabled != want.Enabled || (got.Account == nil) != (want.Account == nil) || got.ModifiedBy != want.ModifiedBy || !got.ModifiedDate.Equal(want.ModifiedDate) {
				t.Errorf("service %s revision %d differs:\n got %+v\nwant %+v", id, want.Revision, got, want)
			}
		}
	}
}

// wantPairs is what a revision Confidant wrote holds, each value with its JSON type.
func wantPairs(t *testing.T, c confidanttest.Credential) credpair.Map {
	t.Helper()
	out := credpair.Strings(c.Pairs)
	if out == nil {
		out = credpair.Map{}
	}
	typed, err := credpair.FromJSONTexts(c.TypedPairs)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(out, typed)
	return out
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// noSecrets fails when any secret value appears in what the import printed.
func noSecrets(t *testing.T, values []string, outputs ...string) {
	t.Helper()
	for _, out := range outputs {
		for _, v := range values {
			if strings.Contains(out, v) {
				t.Errorf("a secret value (%s...) appears in the output:\n%s", v[:3], out)
			}
		}
	}
}

func reportJSON(t *testing.T, rep *confidant.Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("report JSON does not parse: %v", err)
	}
	return buf.String()
}

func TestImportCarriesEveryRevisionAndMapping(t *testing.T) {
	for name, open := range map[string]func(testing.TB) store.Store{"bbolt": newBolt, "etcd": newEtcd} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, open(t))
			_, values := e.seed(t)
			e.dynamo.SetPageLimit(3) // the scan pages, as a real table of any size does
			encryptsBefore := e.kmsFake.Requests("Encrypt") + e.kmsFake.Requests("GenerateDataKey")
			rep, text := e.run(t, context.Background(), confidant.Options{})
			if !rep.OK() || rep.Verification != "passed" {
				t.Fatalf("import failed:\n%s", text)
			}
			if c := rep.Credentials; c.Found != 3 || c.Revisions != 6 || c.Written != 6 || c.Verified != 6 || c.Failed != 0 {
				t.Errorf("credential counts %+v\n%s", c, text)
			}
			if s := rep.Services; s.Found != 2 || s.Revisions != 4 || s.Written != 4 || s.Verified != 4 {
				t.Errorf("service counts %+v\n%s", s, text)
			}
			if rep.BlindCredentials.Found != 1 || len(rep.Skipped) != 1 || rep.Skipped[0].Kind != "blind-credential" ||
				!strings.Contains(rep.Skipped[0].Reason, "mapped by services web-production") || rep.Skipped[0].Name != "legacy-blind" {
				t.Errorf("the blind credential is not reported with its mapping: %+v", rep.Skipped)
			}
			e.checkStored(t)
			// Read-only on Confidant's side: scans only, and KMS only decrypted.
			if e.dynamo.Writes() != 0 || e.dynamo.Requests("Scan") < 5 {
				t.Errorf("DynamoDB: %d writes, %d scans", e.dynamo.Writes(), e.dynamo.Requests("Scan"))
			}
			if n := e.kmsFake.Requests("Encrypt") + e.kmsFake.Requests("GenerateDataKey") - encryptsBefore; n != 0 {
				t.Errorf("the import asked Confidant's KMS to encrypt %d times", n)
			}
			noSecrets(t, values, text, reportJSON(t, rep))
		})
	}
}

func TestSecondRunChangesNothing(t *testing.T) {
	e := newEnv(t, newBolt(t))
	e.seed(t)
	if rep, text := e.run(t, context.Background(), confidant.Options{}); !rep.OK() {
		t.Fatalf("first run:\n%s", text)
	}
	ctx := context.Background()
	before, _ := e.store.GetCredential(ctx, slices.Collect(maps.Keys(e.table.Credentials))[0])
	rep, text := e.run(t, ctx, confidant.Options{})
	if !rep.OK() || !rep.NothingToDo() || rep.Credentials.Written != 0 || rep.Services.Written != 0 ||
		rep.Credentials.Unchanged != 6 || rep.Services.Unchanged != 4 || rep.Credentials.Verified != 6 {
		t.Fatalf("second run:\n%s", text)
	}
	if !strings.Contains(text, "nothing to do") {
		t.Errorf("the second run does not say it changed nothing:\n%s", text)
	}
	after, _ := e.store.GetCredential(ctx, before.ID)
	if !bytes.Equal(before.SealedPairs, after.SealedPairs) || before.Revision != after.Revision {
		t.Error("the second run rewrote a credential")
	}
}

func TestDryRunDecryptsAndWritesNothing(t *testing.T) {
	e := newEnv(t, newBolt(t))
	_, values := e.seed(t)
	decrypts := e.kmsFake.Requests("Decrypt")
	rep, text := e.run(t, context.Background(), confidant.Options{DryRun: true})
	if !rep.OK() || rep.Credentials.Written != 6 || rep.Services.Written != 4 || rep.Verification != "skipped (dry run)" {
		t.Fatalf("dry run:\n%s", text)
	}
	if has, err := e.store.HasData(context.Background()); err != nil || has {
		t.Fatalf("the dry run wrote into gantry's store (HasData %v, %v)", has, err)
	}
	if n := e.kmsFake.Requests("Decrypt") - decrypts; n != 6 {
		t.Errorf("the dry run decrypted %d data keys, want 6 (one per revision)", n)
	}
	if !strings.Contains(text, "dry run") || !strings.Contains(text, "6 to write") {
		t.Errorf("the dry run report does not say what it would write:\n%s", text)
	}
	noSecrets(t, values, text, reportJSON(t, rep))
}

func TestInterruptedRunContinues(t *testing.T) {
	e := newEnv(t, newBolt(t))
	e.seed(t)
	ctx, cancel := context.WithCancel(context.Background())
	writes := 0
	rep, text := e.run(t, ctx, confidant.Options{Workers: 1, OnWrite: func(string, string, int32) {
		if writes++; writes == 4 {
			cancel() // as SIGINT does: in the middle of the credentials
		}
	}})
	if rep.OK() || !rep.Interrupted || !strings.Contains(text, "FAILED") {
		t.Fatalf("an interrupted run reports success:\n%s", text)
	}
	rep, text = e.run(t, context.Background(), confidant.Options{})
	if !rep.OK() || rep.Credentials.Written+rep.Credentials.Unchanged != 6 || rep.Credentials.Unchanged < 4 || rep.Services.Written != 4 {
		t.Fatalf("the second run did not continue:\n%s", text)
	}
	e.checkStored(t)
}

func TestLateWritesAreImportedOnTheNextRun(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	if rep, text := e.run(t, context.Background(), confidant.Options{}); !rep.OK() {
		t.Fatalf("first run:\n%s", text)
	}
	if err := e.table.UpdateCredential(context.Background(), ids[1], func(c *confidanttest.Credential) { c.Pairs["token"] = "xoxb-rotated" }); err != nil {
		t.Fatal(err)
	}
	e.table.PutService("worker", []string{ids[1], ids[2]}, nil, nil)
	rep, text := e.run(t, context.Background(), confidant.Options{})
	if !rep.OK() || rep.Credentials.Written != 1 || rep.Services.Written != 1 {
		t.Fatalf("late writes:\n%s", text)
	}
	e.checkStored(t)
}

func TestProblemsAreReportedOneByOne(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, values := e.seed(t)
	ctx := context.Background()
	// A credential whose data key was wrapped for another credential id: KMS refuses the context.
	bad, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "moved", Pairs: map[string]string{"k": "v-secret"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "other", Pairs: map[string]string{"k": "o-secret"}, Enabled: true})
	swapDataKey(t, e, bad, other)
	e.table.PutService("uses-bad", []string{bad, ids[0]}, nil, nil)
	e.dynamo.Put(tableName, dynamotest.Item{"id": {"S": "strange"}, "data_type": {"S": "certificate"}})
	rep, text := e.run(t, ctx, confidant.Options{})
	if rep.OK() || !strings.Contains(text, "FAILED") {
		t.Fatalf("an import with failures reports success:\n%s", text)
	}
	want := []string{
		"credential " + bad + " revision 1 (\"moved\"): KMS could not decrypt the data key",
		"service uses-bad revision 1: maps credentials that are not imported: " + bad,
		"item strange: unknown data_type \"certificate\"",
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("report lacks %q:\n%s", w, text)
		}
	}
	// Everything else is imported and verified, and the verification does not pass: a credential
	// and a service are not in gantry (issue 41: "passed" was printed with records failed).
	if rep.Credentials.Written != 7 || rep.Credentials.Verified != 7 || !strings.HasPrefix(rep.Verification, "failed (2 failures") {
		t.Errorf("the good records were not imported:\n%s", text)
	}
	noSecrets(t, append(values, "v-secret", "o-secret"), text, reportJSON(t, rep))
}

// swapDataKey gives credential a's items the data key and pairs of b's: the pairs are intact, but
// KMS only opens the data key with b's id as encryption context.
func swapDataKey(t *testing.T, e *env, a, b string) {
	t.Helper()
	for _, id := range []string{a, a + "-1"} {
		e.dynamo.Edit(tableName, id, func(it dynamotest.Item) {
			src := e.dynamo.Get(tableName, b)
			it["data_key"] = src["data_key"]
			it["credential_pairs"] = src["credential_pairs"]
		})
	}
}

// TestRenamedNameTakenLaterImports: credential A is created as "x" and renamed "y", then B is created
// as "x" — legal in Confidant, which checks names against current credentials only. gantry checks the
// same, so A's revision 1 must be written before B takes the name, whichever id sorts first.
func TestRenamedNameTakenLaterImports(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ctx := context.Background()
	a := "ffffffffffffffffffffffffffffffff"
	b := "00000000000000000000000000000000" // sorts first: imported first without the ordering
	if _, err := e.table.CreateCredential(ctx, confidanttest.Credential{ID: a, Name: "x", Pairs: map[string]string{"k": "1"}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.table.UpdateCredential(ctx, a, func(c *confidanttest.Credential) { c.Name = "y" }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.table.CreateCredential(ctx, confidanttest.Credential{ID: b, Name: "x", Pairs: map[string]string{"k": "2"}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	rep, text := e.run(t, ctx, confidant.Options{Workers: 1}) // one worker: B is taken before A
	if !rep.OK() || rep.Credentials.Written != 3 {
		t.Fatalf("import:\n%s", text)
	}
	e.checkStored(t)
}

// TestServiceHistoryNamingVanishedCredentials: Confidant's archiving moves a credential out of the
// table once no current service maps it, but older service revisions still name it. Those ids are
// left out of the revisions that name them, each revision reported, and the service is imported.
func TestServiceHistoryNamingVanishedCredentials(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ids, _ := e.seed(t)
	ctx := context.Background()
	gone, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "old", Pairs: map[string]string{"k": "v"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	e.table.PutService("batch", []string{ids[0], gone}, nil, nil)
	e.table.PutService("batch", []string{ids[0]}, nil, nil)
	e.dynamo.Delete(tableName, gone)
	e.dynamo.Delete(tableName, gone+"-1")
	rep, text := e.run(t, ctx, confidant.Options{})
	if !rep.OK() || rep.Services.Written != 6 || !strings.Contains(text, "service batch revision 1: maps credentials that are no longer in Confidant's table") {
		t.Fatalf("import:\n%s", text)
	}
	got, err := e.store.GetServiceRevision(ctx, "batch", 1)
	if err != nil || !slices.Equal(got.Credentials, []string{ids[0]}) {
		t.Fatalf("batch revision 1 = %+v, %v", got, err)
	}
}

// TestOrphanBlindRevisionsAreReported: archive items of a blind credential whose current item is gone
// are reported too, never dropped in silence.
func TestOrphanBlindRevisionsAreReported(t *testing.T) {
	e := newEnv(t, newBolt(t))
	e.seed(t)
	orphan := e.table.CreateBlindCredential("orphan")
	e.dynamo.Delete(tableName, orphan)
	rep, text := e.run(t, context.Background(), confidant.Options{})
	if !rep.OK() || !strings.Contains(text, "blind-credential "+orphan+" revision 1 (\"orphan\"): archive revision of a blind credential whose current item is gone") {
		t.Fatalf("import:\n%s", text)
	}
}

// TestImportKeepsJSONTypes: Confidant 7 accepts numbers, booleans and null as values and serves them
// with their type; the import keeps each one's type (and a number's digits), imports the services
// that map such a credential, and a revision that only changes a value's type is a change.
func TestImportKeepsJSONTypes(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ctx := context.Background()
	id, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "typed", Enabled: true,
		Pairs:      map[string]string{"password": "s3cr3t-typed", "port_text": "5432"},
		TypedPairs: map[string]string{"port": "5432", "debug": "true", "off": "false", "maybe": "null", "ratio": "1.5", "big": "12345678901234567890", "tiny": "1e-07"}})
	if err != nil {
		t.Fatal(err)
	}
	// Revision 2 changes only a type: the number 5432 becomes the string "5432".
	if err := e.table.UpdateCredential(ctx, id, func(c *confidanttest.Credential) {
		delete(c.TypedPairs, "port")
		c.Pairs["port"] = "5432"
	}); err != nil {
		t.Fatal(err)
	}
	e.table.PutService("typed-consumer", []string{id}, nil, nil)
	rep, text := e.run(t, ctx, confidant.Options{})
	if !rep.OK() || rep.Verification != "passed" || len(rep.Failures) != 0 {
		t.Fatalf("import of typed values failed:\n%s", text)
	}
	if c := rep.Credentials; c.Written != 2 || c.Verified != 2 {
		t.Errorf("credential counts %+v\n%s", c, text)
	}
	if s := rep.Services; s.Written != 1 || s.Verified != 1 {
		t.Errorf("service counts %+v\n%s", s, text)
	}
	e.checkStored(t)
	_, first, err := e.importer.CredentialRevision(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"port": "5432", "debug": "true", "maybe": "null", "big": "12345678901234567890", "tiny": "1e-07", "port_text": `"5432"`} {
		if got := first[k].JSON(); got != want {
			t.Errorf("revision 1 %s = %s, want %s", k, got, want)
		}
	}
	_, second, err := e.importer.CredentialRevision(ctx, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	if second["port"] != credpair.Str("5432") || maps.Equal(first, second) {
		t.Errorf("revision 2's port is %s (kind %s), want the string \"5432\"", second["port"].JSON(), second["port"].Kind())
	}
	noSecrets(t, []string{"s3cr3t-typed"}, text, reportJSON(t, rep))
	// A second run finds nothing to do: the typed values compare equal to what was written.
	if rep, text := e.run(t, ctx, confidant.Options{}); !rep.OK() || !rep.NothingToDo() || rep.Verification != "passed" {
		t.Fatalf("second run:\n%s", text)
	}
}
