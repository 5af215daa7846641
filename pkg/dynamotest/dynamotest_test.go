package dynamotest_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
)

func newFake(t *testing.T) (*dynamotest.Server, *dynamodb.Client) {
	t.Helper()
	srv := dynamotest.NewServer()
	t.Cleanup(srv.Close)
	srv.CreateTable("confidant", "id", map[string]dynamotest.Index{"data_type_date_index": {Hash: "data_type", Range: "modified_date"}})
	for i := range 25 {
		dt := "credential"
		if i%5 == 0 {
			dt = "service"
		}
		srv.Put("confidant", dynamotest.Item{
			"id":            {"S": fmt.Sprintf("item%02d", i)},
			"data_type":     {"S": dt},
			"modified_date": {"S": fmt.Sprintf("2020-01-%02dT00:00:00.000000+0000", 25-i)},
			"revision":      {"N": "1"},
			"data_key":      {"B": "AAEC"},
		})
	}
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		Retryer:      awstest.ConnectionRetriesOnly(),
	})
	return srv, client
}

func TestScanPagesThroughEveryItem(t *testing.T) {
	srv, client := newFake(t)
	srv.SetPageLimit(4)
	ctx := context.Background()
	seen := map[string]bool{}
	pages := 0
	var start map[string]types.AttributeValue
	for {
		out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("confidant"), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, it := range out.Items {
			id := it["id"].(*types.AttributeValueMemberS).Value
			if seen[id] {
				t.Fatalf("%s returned twice", id)
			}
			seen[id] = true
			if b := it["data_key"].(*types.AttributeValueMemberB).Value; string(b) != "\x00\x01\x02" {
				t.Fatalf("binary attribute = %q", b)
			}
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		start = out.LastEvaluatedKey
	}
	if len(seen) != 25 || pages != 7 {
		t.Fatalf("saw %d items in %d pages, want 25 in 7", len(seen), pages)
	}
}

func TestQueryIndexSortedAndPaged(t *testing.T) {
	srv, client := newFake(t)
	srv.SetPageLimit(2)
	ctx := context.Background()
	var got []string
	p := dynamodb.NewQueryPaginator(client, &dynamodb.QueryInput{
		TableName:                 aws.String("confidant"),
		IndexName:                 aws.String("data_type_date_index"),
		KeyConditionExpression:    aws.String("#dt = :dt"),
		ExpressionAttributeNames:  map[string]string{"#dt": "data_type"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":dt": &types.AttributeValueMemberS{Value: "service"}},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			got = append(got, it["id"].(*types.AttributeValueMemberS).Value)
		}
	}
	// Sorted by modified_date ascending: item20 is the oldest.
	if fmt.Sprint(got) != "[item20 item15 item10 item05 item00]" {
		t.Fatalf("query = %v", got)
	}
}

func TestGetItemAndReadOnly(t *testing.T) {
	srv, client := newFake(t)
	ctx := context.Background()
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("confidant"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "item03"}}})
	if err != nil || out.Item == nil {
		t.Fatalf("GetItem = %v, %v", out, err)
	}
	out, err = client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("confidant"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "nope"}}})
	if err != nil || out.Item != nil {
		t.Fatalf("GetItem of a missing item = %v, %v", out.Item, err)
	}
	_, err = client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("other"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}})
	var notFound *types.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Fatalf("unknown table: %v", err)
	}
	_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("confidant"), Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDeniedException" || srv.Writes() != 1 {
		t.Fatalf("PutItem: %v (writes %d)", err, srv.Writes())
	}
}

// TestResponsesCarryCRC32: every response has DynamoDB's X-Amz-Crc32 of its body, errors too.
func TestResponsesCarryCRC32(t *testing.T) {
	srv, _ := newFake(t)
	for _, target := range []string{"DynamoDB_20120810.Scan", "DynamoDB_20120810.PutItem"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL(), strings.NewReader(`{"TableName": "t"}`))
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("X-Amz-Date", "20240101T000000Z")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/dynamodb/aws4_request")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := resp.Header.Get("X-Amz-Crc32"), strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10); got != want {
			t.Errorf("%s: X-Amz-Crc32 %q, want %q (%d %s)", target, got, want, resp.StatusCode, body)
		}
	}
}
