package confidant_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// BenchmarkImport10000x5 imports a Confidant table of 10,000 credentials with 5 revisions each (60,000
// items with the current records) and 1,000 services into a bbolt store, verification included:
//
//	go test ./services/secrets/confidant -run '^$' -bench Import10000x5 -benchtime 1x
//
// Confidant's data keys are wrapped by a local keyring here, so the figure is gantry's side (the scan
// through the DynamoDB fake, Fernet, sealing, bbolt writes, reading back); against AWS KMS add one
// Decrypt round trip per revision, spread over -import-workers.
func BenchmarkImport10000x5(b *testing.B) {
	const credentialsN, revisions, servicesN = 10000, 5, 1000
	ctx := context.Background()
	dynamo := dynamotest.NewServer()
	b.Cleanup(dynamo.Close)
	sourceKeys, err := kms.OpenKeyring(filepath.Join(b.TempDir(), "confidant-keyring.json"), nil)
	if err != nil {
		b.Fatal(err)
	}
	table := confidanttest.NewTable(dynamo, tableName, sourceKeys, kms.AliasMaster)
	seedEstate(ctx, b, table, credentialsN, revisions, servicesN)
	scanner := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(dynamo.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "example", ""),
		Retryer:     awstest.ConnectionRetriesOnly(),
	})
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		store := newBolt(b)
		ring, err := kms.OpenKeyring(filepath.Join(b.TempDir(), "keyring.json"), nil)
		if err != nil {
			b.Fatal(err)
		}
		importer := secrets.NewImporter(store, ring, kms.AliasMaster, 4096, zap.NewNop())
		b.StartTimer()
		rep, err := confidant.Run(ctx, scanner, sourceKeys, importer, confidant.Options{Table: tableName, Workers: 8})
		if err != nil || !rep.OK() || rep.Credentials.Written != credentialsN*revisions || rep.Credentials.Verified != credentialsN*revisions {
			var text strings.Builder
			rep.WriteText(&text)
			b.Fatalf("import: %v\n%s", err, text.String())
		}
	}
	b.ReportMetric(float64(credentialsN*revisions*b.N)/b.Elapsed().Seconds(), "revisions/s")
}

// seedEstate fills a Confidant table as the import benchmarks read it: credentialsN credentials of
// two pairs with revisions revisions each, and servicesN services mapping 10 credentials each.
func seedEstate(ctx context.Context, b *testing.B, table *confidanttest.Table, credentialsN, revisions, servicesN int) {
	b.Helper()
	ids := make([]string, credentialsN)
	for i := range ids {
		pairs := map[string]string{"username": fmt.Sprintf("user%d", i), "password": strings.Repeat("p", 32)}
		var err error
		if ids[i], err = table.CreateCredential(ctx, confidanttest.Credential{Name: fmt.Sprintf("cred-%05d", i), Pairs: pairs, Enabled: true}); err != nil {
			b.Fatal(err)
		}
		for r := 2; r <= revisions; r++ {
			if err := table.UpdateCredential(ctx, ids[i], func(c *confidanttest.Credential) { c.Pairs["password"] = strings.Repeat("q", 30+r) }); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range servicesN {
		first := i * 10 % credentialsN
		table.PutService(fmt.Sprintf("service-%04d", i), ids[first:min(first+10, credentialsN)], nil, nil)
	}
}
