package confidant_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// The estate and latencies of BenchmarkImportKMSLatency (go test ... -args -kms-latency 20ms).
var (
	benchKMSLatency    = flag.Duration("kms-latency", 10*time.Millisecond, "BenchmarkImportKMSLatency: the KMS fake's delay per call")
	benchDynamoLatency = flag.Duration("dynamodb-latency", 10*time.Millisecond, "BenchmarkImportKMSLatency: the DynamoDB fake's delay per Scan page")
	benchCredentials   = flag.Int("credentials", 2000, "BenchmarkImportKMSLatency: credentials in the table (5 revisions each)")
	benchWorkers       = flag.String("workers", "8,16,32,64", "BenchmarkImportKMSLatency: the -import-workers of the sub-benchmarks")
	benchKMSRate       = flag.Float64("kms-rate", 0, "BenchmarkImportKMSLatency: -import-kms-rate (0: no cap)")
	benchGantryAWS     = flag.Bool("gantry-kms-aws", false, "BenchmarkImportKMSLatency: gantry seals under a KMS fake with the same latency (-kms=aws) instead of the local keyring")
)

// BenchmarkImportKMSLatency imports a Confidant table (2,000 credentials of 5 revisions, 12,000 items
// with the current ones, and 200 services) into bbolt, verification included, with the KMS fake
// answering each call 10 ms late and the DynamoDB fake each Scan page 10 ms late (pages of at most
// 1 MB with LastEvaluatedKey, as DynamoDB pages), once per -import-workers:
//
//	go test ./services/secrets/confidant -run '^$' -bench ImportKMSLatency -benchtime 1x
//
// Besides revisions/s (the whole run) it reports where the time went: the phases (scan, import,
// verify, in seconds) and, per revision, a worker's wait for Confidant's KMS Decrypt and for its
// write to commit (bbolt's group commit: more workers, larger commits), and the time of a second
// run with nothing new to write (rerun-s: the catch-up run of the write freeze). A worker spends
// decrypt-ms + write-ms on each revision, so the import phase runs at about workers / (decrypt-ms +
// write-ms) revisions per millisecond until the store's commits or the CPU are the limit.
func BenchmarkImportKMSLatency(b *testing.B) {
	var workers []int
	for _, w := range strings.Split(*benchWorkers, ",") {
		var n int
		if _, err := fmt.Sscan(w, &n); err != nil {
			b.Fatalf("-workers %q: %v", *benchWorkers, err)
		}
		workers = append(workers, n)
	}
	const revisions = 5
	credentialsN, servicesN := *benchCredentials, max(*benchCredentials/10, 1)
	ctx := context.Background()
	b.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "example")

	kmsFake := kmstest.NewServer()
	b.Cleanup(kmsFake.Close)
	kmsFake.CreateKey("alias/confidant")
	seeder, err := kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL()}, nil, func(o *awskms.Options) { o.Retryer = awstest.ConnectionRetriesOnly() })
	if err != nil {
		b.Fatal(err)
	}
	dynamo := dynamotest.NewServer()
	b.Cleanup(dynamo.Close)
	table := confidanttest.NewTable(dynamo, tableName, seeder, "alias/confidant")
	seedEstate(ctx, b, table, credentialsN, revisions, servicesN)
	kmsFake.SetLatency(*benchKMSLatency)
	dynamo.SetLatency(*benchDynamoLatency)
	scanner := dynamodb.New(dynamodb.Options{
		Region: kmstest.Region, BaseEndpoint: aws.String(dynamo.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "example", ""),
		Retryer:     awstest.ConnectionRetriesOnly(),
	})
	var gantryKMS *kmstest.Server
	if *benchGantryAWS {
		gantryKMS = kmstest.NewServer()
		b.Cleanup(gantryKMS.Close)
		gantryKMS.CreateKey(kms.AliasMaster)
		gantryKMS.SetLatency(*benchKMSLatency)
	}

	for _, w := range workers {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			var decrypts, writes timing
			var firstDecrypt, lastWrite atomic.Int64
			for range b.N {
				b.StopTimer()
				firstDecrypt.Store(0)
				lastWrite.Store(0)
				st := newBolt(b)
				var provider kms.Provider
				if gantryKMS != nil {
					provider, err = kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: gantryKMS.URL(), MaxConns: 64}, nil, func(o *awskms.Options) { o.Retryer = confidant.KMSRetryer(20 * time.Second) })
				} else {
					provider, err = kms.OpenKeyring(filepath.Join(b.TempDir(), "keyring.json"), nil)
				}
				if err != nil {
					b.Fatal(err)
				}
				source, err := kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL(), MaxConns: w}, nil, func(o *awskms.Options) { o.Retryer = confidant.KMSRetryer(20 * time.Second) })
				if err != nil {
					b.Fatal(err)
				}
				importer := secrets.NewImporter(st, provider, kms.AliasMaster, 4096, zap.NewNop())
				start := time.Now()
				b.StartTimer()
				rep, err := confidant.Run(ctx, scanner, timedKeys{source, &decrypts, &firstDecrypt}, timedTarget{importer, &writes, &lastWrite},
					confidant.Options{Table: tableName, Workers: w, KMSRate: *benchKMSRate})
				b.StopTimer()
				if err != nil || !rep.OK() || rep.Credentials.Written != credentialsN*revisions || rep.Credentials.Verified != credentialsN*revisions {
					var text strings.Builder
					rep.WriteText(&text)
					b.Fatalf("import: %v\n%s", err, text.String())
				}
				end := time.Now()
				b.ReportMetric(time.Unix(0, firstDecrypt.Load()).Sub(start).Seconds(), "scan-s")
				b.ReportMetric(time.Unix(0, lastWrite.Load()).Sub(time.Unix(0, firstDecrypt.Load())).Seconds(), "import-s")
				b.ReportMetric(end.Sub(time.Unix(0, lastWrite.Load())).Seconds(), "verify-s")
				// The catch-up run of the write freeze (runbook step 5) with nothing new: it writes
				// nothing, but decrypts and verifies every revision again.
				rerun := time.Now()
				rep, err = confidant.Run(ctx, scanner, source, importer, confidant.Options{Table: tableName, Workers: w, KMSRate: *benchKMSRate})
				if err != nil || !rep.OK() || rep.Credentials.Unchanged != credentialsN*revisions {
					b.Fatalf("second run: %v\n%s", err, reportText(rep))
				}
				b.ReportMetric(time.Since(rerun).Seconds(), "rerun-s")
				b.StartTimer()
			}
			b.ReportMetric(float64(credentialsN*revisions*b.N)/b.Elapsed().Seconds(), "revisions/s")
			b.ReportMetric(decrypts.mean(), "decrypt-ms/rev")
			b.ReportMetric(writes.mean(), "write-ms/rev")
		})
	}
}

// timing sums the durations of calls.
type timing struct {
	mu    sync.Mutex
	n     int
	total time.Duration
}

func (t *timing) add(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	t.total += d
}

// mean is the mean call in milliseconds.
func (t *timing) mean() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		return 0
	}
	return float64(t.total.Microseconds()) / 1000 / float64(t.n)
}

// timedKeys times Confidant's KMS Decrypt calls, and notes when the first one began (the scan's end).
type timedKeys struct {
	kms.Provider
	t     *timing
	first *atomic.Int64
}

func (k timedKeys) Decrypt(ctx context.Context, ciphertext []byte, encryptionContext map[string]string) ([]byte, string, error) {
	start := time.Now()
	k.first.CompareAndSwap(0, start.UnixNano())
	defer func() { k.t.add(time.Since(start)) }()
	return k.Provider.Decrypt(ctx, ciphertext, encryptionContext)
}

// timedTarget times the writes of credential revisions, and notes when the last write of any kind
// ended (the import phase's end).
type timedTarget struct {
	*secrets.Importer
	t    *timing
	last *atomic.Int64
}

func (d timedTarget) PutCredentialRevision(ctx context.Context, rec *store.CredentialRecord, pairs credpair.Map) error {
	start := time.Now()
	defer func() { d.t.add(time.Since(start)); d.last.Store(time.Now().UnixNano()) }()
	return d.Importer.PutCredentialRevision(ctx, rec, pairs)
}

func (d timedTarget) PutServiceRevision(ctx context.Context, rec *store.ServiceRecord) error {
	defer func() { d.last.Store(time.Now().UnixNano()) }()
	return d.Importer.PutServiceRevision(ctx, rec)
}
