package confidant_test

import (
	"context"
	"fmt"
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
	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// capturedEnv is the table the real Confidant 7.0.0 wrote (testdata/README.md) in the DynamoDB fake,
// its KMS key in the KMS fake, and a gantry store.
type capturedEnv struct {
	dynamo   *dynamotest.Server
	kmsFake  *kmstest.Server
	want     *confidanttest.Captured
	source   kms.Provider
	scanner  *dynamodb.Client
	store    store.Store
	importer *secrets.Importer
}

func newCapturedEnv(t testing.TB, store store.Store) *capturedEnv {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	e := &capturedEnv{dynamo: dynamotest.NewServer(), kmsFake: kmstest.NewServer(), store: store}
	t.Cleanup(e.dynamo.Close)
	t.Cleanup(e.kmsFake.Close)
	var err error
	if e.want, err = confidanttest.LoadCaptured(e.dynamo, e.kmsFake); err != nil {
		t.Fatal(err)
	}
	e.source, err = kms.NewAWS(context.Background(), kms.AWSConfig{Region: kmstest.Region, Endpoint: e.kmsFake.URL()}, nil, func(o *awskms.Options) { o.Retryer = awstest.ConnectionRetriesOnly() })
	if err != nil {
		t.Fatal(err)
	}
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

func (e *capturedEnv) run(t testing.TB, opts confidant.Options) (*confidant.Report, string) {
	t.Helper()
	opts.Table = confidanttest.CapturedTable
	opts.Workers = 4
	opts.Logger = logtest.New(t)
	rep, err := confidant.Run(context.Background(), e.scanner, e.source, e.importer, opts)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	rep.WriteText(&text)
	return rep, text.String()
}

// item is a captured item as the fake holds it.
func (e *capturedEnv) item(t testing.TB, table, id string) dynamotest.Item {
	t.Helper()
	it := e.dynamo.Get(table, id)
	if it == nil {
		t.Fatalf("no captured item %s in %s", id, table)
	}
	return it
}

func capturedDate(t testing.TB, it dynamotest.Item, name string) time.Time {
	t.Helper()
	s, _ := it[name]["S"].(string)
	d, err := time.Parse("2006-01-02T15:04:05.000000-0700", s)
	if err != nil {
		t.Fatalf("%s %q: %v", name, s, err)
	}
	return d
}

// stringPairs is what gantry stores of Confidant's decrypted pairs: every value a string.
func stringPairs(p map[string]any) credpair.Map {
	out := credpair.Map{}
	for k, v := range p {
		out[k], _ = credpair.FromAny(v)
	}
	return out
}

// checkCaptured compares every revision of every credential Confidant's main table holds with what
// Confidant's own models read back, and every service's current revision.
func (e *capturedEnv) checkCaptured(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for id, want := range e.want.Credentials {
		if want.Archived {
			continue
		}
		for rev, wr := range want.Revisions {
			var k int32
			fmt.Sscan(rev, &k)
			got, pairs, err := e.importer.CredentialRevision(ctx, id, k)
			if err != nil {
				t.Errorf("credential %s (%s) revision %d: %v", id, want.Name, k, err)
				continue
			}
			if !maps.Equal(pairs, stringPairs(wr.Pairs)) || got.Name != wr.Name || got.Enabled != wr.Enabled || got.ModifiedBy != wr.ModifiedBy {
				t.Errorf("credential %s revision %d: got %s enabled=%v by %s, want %s enabled=%v by %s (pairs equal: %v)", id, k,
					got.Name, got.Enabled, got.ModifiedBy, wr.Name, wr.Enabled, wr.ModifiedBy, maps.Equal(pairs, stringPairs(wr.Pairs)))
			}
			if !got.ModifiedDate.Equal(wr.ModifiedDate) || !maps.Equal(got.Metadata, wr.Metadata) || !slices.Equal(sorted(got.Tags), sorted(wr.Tags)) ||
				(got.Documentation == nil) != (wr.Documentation == nil) || (got.Documentation != nil && *got.Documentation != *wr.Documentation) ||
				(got.LastRotationDate == nil) != (wr.LastRotationDate == nil) || (got.LastRotationDate != nil && !got.LastRotationDate.Equal(*wr.LastRotationDate)) {
				t.Errorf("credential %s revision %d: got date %s metadata %v tags %v documentation %v rotated %v; Confidant's model read %s %v %v %v %v", id, k,
					got.ModifiedDate, got.Metadata, got.Tags, got.Documentation, got.LastRotationDate,
					wr.ModifiedDate, wr.Metadata, wr.Tags, wr.Documentation, wr.LastRotationDate)
			}
		}
		// Every revision keeps its archive item's date, the current one too: Confidant builds the
		// current item a few milliseconds later, but once a later revision replaces it only the
		// archive item says what the revision was (TestLateWritesAreImportedOnTheNextRun).
		cur, err := e.store.GetCredential(ctx, id)
		if err != nil || int(cur.Revision) != want.Revision {
			t.Fatalf("current revision of %s = %v, %v; want %d", id, cur, err, want.Revision)
		}
		archiveItem := e.item(t, confidanttest.CapturedTable, fmt.Sprintf("%s-%d", id, want.Revision))
		if d := capturedDate(t, archiveItem, "modified_date"); !cur.ModifiedDate.Equal(d) {
			t.Errorf("credential %s: modified_date %s, want its archive item's %s", id, cur.ModifiedDate, d)
		}
	}
	for id, want := range e.want.Services {
		got, err := e.store.GetService(ctx, id)
		if err != nil {
			t.Fatalf("service %s: %v", id, err)
		}
		if int(got.Revision) != want.Revision || got.Enabled != want.Enabled || !slices.Equal(sorted(got.Credentials), want.Credentials) ||
			!slices.Equal(sorted(got.BlindCredentials), want.BlindCredentials) || (got.Account == nil) != (want.Account == nil) {
			t.Errorf("service %s: got %+v, want %+v", id, got, want)
		}
	}
}

// TestCapturedConfidantTableImports: the table the real Confidant wrote imports with a clean
// verification, every revision with the pairs Confidant's own models decrypt, and a second run
// changes nothing.
func TestCapturedConfidantTableImports(t *testing.T) {
	e := newCapturedEnv(t, newBolt(t))
	rep, text := e.run(t, confidant.Options{})
	if !rep.OK() || rep.Verification != "passed" {
		t.Fatalf("import of the captured table failed:\n%s", text)
	}
	if c := rep.Credentials; c.Found != 4 || c.Revisions != 9 || c.Written != 9 || c.Verified != 9 {
		t.Errorf("credential counts %+v\n%s", c, text)
	}
	if s := rep.Services; s.Found != 3 || s.Revisions != 6 || s.Written != 6 || s.Verified != 6 {
		t.Errorf("service counts %+v\n%s", s, text)
	}
	if rep.BlindCredentials.Found != 1 {
		t.Errorf("blind credentials %+v\n%s", rep.BlindCredentials, text)
	}
	e.checkCaptured(t)
	if e.dynamo.Writes() != 0 {
		t.Errorf("the import wrote to Confidant's table %d times", e.dynamo.Writes())
	}
	rep, text = e.run(t, confidant.Options{})
	if !rep.OK() || !rep.NothingToDo() {
		t.Fatalf("second run:\n%s", text)
	}
}

// TestCapturedArchiveTableImports: with DYNAMODB_TABLE_ARCHIVE given, the credentials Confidant's
// archive script moved there are imported with every revision, the service history that named them
// keeps their ids, and they end in gantry's archive stamped with Confidant's archive_date; a second
// run finds them archived and changes nothing.
func TestCapturedArchiveTableImports(t *testing.T) {
	for name, open := range map[string]func(testing.TB) store.Store{"bbolt": newBolt, "etcd": newEtcd} {
		t.Run(name, func(t *testing.T) {
			e := newCapturedEnv(t, open(t))
			ctx := context.Background()
			rep, text := e.run(t, confidant.Options{ArchiveTable: confidanttest.CapturedArchiveTable, DryRun: true})
			if !rep.OK() || rep.ArchivedCredentials.Archived != 2 || rep.ArchivedCredentials.Written != 3 || !strings.Contains(text, "2 to move to gantry's archive") {
				t.Fatalf("dry run:\n%s", text)
			}
			if has, err := e.store.HasData(ctx); err != nil || has {
				t.Fatalf("the dry run wrote (HasData %v, %v)", has, err)
			}

			rep, text = e.run(t, confidant.Options{ArchiveTable: confidanttest.CapturedArchiveTable})
			if !rep.OK() || rep.Verification != "passed" {
				t.Fatalf("import with the archive table failed:\n%s", text)
			}
			if a := rep.ArchivedCredentials; a.Found != 2 || a.Revisions != 3 || a.Written != 3 || a.Verified != 3 || a.Archived != 2 {
				t.Errorf("archived credential counts %+v\n%s", a, text)
			}
			if c := rep.Credentials; c.Found != 4 || c.Written != 9 || c.Verified != 9 {
				t.Errorf("credential counts %+v\n%s", c, text)
			}
			if strings.Contains(text, "no longer in Confidant's table") || !strings.Contains(text, "archived:  ") || !strings.Contains(text, "2 moved to gantry's archive") {
				t.Errorf("report:\n%s", text)
			}
			e.checkCaptured(t)
			for id, want := range e.want.Credentials {
				if !want.Archived {
					continue
				}
				if _, err := e.store.GetCredential(ctx, id); err == nil {
					t.Errorf("archived credential %s (%s) is current in gantry", id, want.Name)
				}
				got, pairs, err := e.importer.ArchivedCredential(ctx, id)
				last := want.Revisions[fmt.Sprint(want.Revision)]
				if err != nil || int(got.Revision) != want.Revision || got.Name != want.Name || got.Enabled || !maps.Equal(pairs, stringPairs(last.Pairs)) {
					t.Errorf("archived credential %s: %+v, %v; want revision %d %s disabled with its last pairs", id, got, err, want.Revision, want.Name)
				}
			}
			// Service history that named an archived credential keeps its id.
			for svc, rev := range map[string]int32{"web-production": 1, "payments-api-v2": 1} {
				got, err := e.store.GetServiceRevision(ctx, svc, rev)
				if err != nil {
					t.Fatal(err)
				}
				archived := 0
				for _, id := range got.Credentials {
					if e.want.Credentials[id].Archived {
						archived++
					}
				}
				if archived != 1 {
					t.Errorf("service %s revision %d maps %v: the archived credential's id is lost", svc, rev, got.Credentials)
				}
			}

			rep, text = e.run(t, confidant.Options{ArchiveTable: confidanttest.CapturedArchiveTable})
			if !rep.OK() || !rep.NothingToDo() || rep.ArchivedCredentials.Unchanged != 3 || rep.ArchivedCredentials.Verified != 2 || rep.ArchivedCredentials.Archived != 0 {
				t.Fatalf("second run:\n%s", text)
			}
		})
	}
}

// TestCapturedArchiveDateStamped: gantry's archive holds each archived credential stamped with the
// archive_date Confidant gave its current item (read from the bbolt file: the store's interface
// does not return it).
func TestCapturedArchiveDateStamped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	store, err := boltstore.Open(path, boltdb.Options{Timeout: time.Second}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	e := newCapturedEnv(t, store)
	if rep, text := e.run(t, confidant.Options{ArchiveTable: confidanttest.CapturedArchiveTable}); !rep.OK() {
		t.Fatalf("import:\n%s", text)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checked := 0
	err = db.View(func(tx *bolt.Tx) error {
		for id, want := range e.want.Credentials {
			if !want.Archived {
				continue
			}
			raw := tx.Bucket([]byte("archive_current")).Get([]byte(id))
			a, err := codec.DecodeArchived([]byte("archive_current"), raw)
			if err != nil {
				return fmt.Errorf("archive_current %s: %w", id, err)
			}
			wantAt := capturedDate(t, e.item(t, confidanttest.CapturedArchiveTable, id), "archive_date")
			if !a.ArchivedAt.Equal(wantAt) {
				t.Errorf("credential %s archived at %s, want Confidant's archive_date %s", id, a.ArchivedAt, wantAt)
			}
			checked++
		}
		return nil
	})
	if err != nil || checked != 2 {
		t.Fatalf("%d archived credentials checked: %v", checked, err)
	}
}
