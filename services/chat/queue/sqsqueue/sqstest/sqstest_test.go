package sqstest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/gantry-dev/gantry/pkg/awstest"
)

func newClient(s *Server) *sqs.Client {
	return sqs.New(sqs.Options{
		Region: Region, BaseEndpoint: aws.String(s.URL()), Retryer: awstest.ConnectionRetriesOnly(),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
	})
}

func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// TestWireProtocol: what a request must look like, checked on raw HTTP as the SDK's own requests
// pass by construction.
func TestWireProtocol(t *testing.T) {
	s := NewServer()
	t.Cleanup(s.Close)
	u := s.CreateQueue("wire")
	body := `{"QueueUrl":"` + u + `","AttributeNames":["ApproximateNumberOfMessages"]}`
	signed := "AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00"
	for _, tt := range []struct {
		name, auth, contentType string
		wantStatus              int
		want                    string
	}{
		{"unsigned", "", awstest.ContentType10, 403, "MissingAuthenticationToken"},
		{"signed for another service", strings.Replace(signed, "/sqs/", "/kms/", 1), awstest.ContentType10, 403, "SignatureDoesNotMatch"},
		{"JSON 1.1", signed, awstest.ContentType, 400, "SerializationException"},
		{"good", signed, awstest.ContentType10, 200, `"ApproximateNumberOfMessages":"0"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/", strings.NewReader(body))
			req.Header.Set("Content-Type", tt.contentType)
			req.Header.Set("X-Amz-Target", "AmazonSQS.GetQueueAttributes")
			req.Header.Set("X-Amz-Date", "20260101T000000Z")
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(got), tt.want) {
				t.Errorf("%d %s, want %d with %s", resp.StatusCode, got, tt.wantStatus, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != awstest.ContentType10 {
				t.Errorf("answer Content-Type %q", ct)
			}
		})
	}
}

// TestStaleReceiptHandles: as AWS documents, DeleteMessage with a handle of an earlier receive
// succeeds and deletes nothing, and ChangeMessageVisibility refuses it.
func TestStaleReceiptHandles(t *testing.T) {
	s := NewServer()
	t.Cleanup(s.Close)
	c, ctx, u := newClient(s), context.Background(), s.CreateQueue("stale")
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &u, MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	receive := func() string {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &u, VisibilityTimeout: 1, WaitTimeSeconds: 3})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive: %v %v", out, err)
		}
		return *out.Messages[0].ReceiptHandle
	}
	old := receive()
	current := receive() // after the first lease ran out
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &u, ReceiptHandle: &old}); err != nil {
		t.Fatalf("delete with a stale handle: %v, want success", err)
	}
	if n := len(s.Bodies(u)); n != 1 {
		t.Fatalf("a stale handle deleted the message")
	}
	_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &u, ReceiptHandle: &old, VisibilityTimeout: 5})
	if errorCode(err) != "InvalidParameterValue" {
		t.Errorf("change visibility with a stale handle: %v", err)
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &u, ReceiptHandle: &current}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Bodies(u)); n != 0 {
		t.Fatalf("the current handle did not delete the message")
	}
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &u, ReceiptHandle: aws.String("never-issued")})
	if errorCode(err) != "ReceiptHandleIsInvalid" {
		t.Errorf("delete with a made-up handle: %v", err)
	}
}

// TestFIFO: deduplication ids drop duplicates, and a group delivers one message at a time.
func TestFIFO(t *testing.T) {
	s := NewServer()
	t.Cleanup(s.Close)
	c, ctx, u := newClient(s), context.Background(), s.CreateQueue("orders.fifo")
	send := func(group, dedupe string) string {
		out, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &u, MessageBody: aws.String(dedupe), MessageGroupId: &group, MessageDeduplicationId: &dedupe})
		if err != nil {
			t.Fatal(err)
		}
		return *out.MessageId
	}
	first := send("g", "1")
	if again := send("g", "1"); again != first {
		t.Errorf("a duplicate was answered with another message id")
	}
	send("g", "2")
	send("h", "3")
	if n := s.Sent(u); n != 3 {
		t.Errorf("queue accepted %d messages, want 3", n)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &u, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range out.Messages {
		bodies = append(bodies, *m.Body)
	}
	if strings.Join(bodies, ",") != "1,3" {
		t.Errorf("received %v, want the head of each group: 1,3", bodies)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &u, MessageBody: aws.String("x")}); errorCode(err) != "MissingParameter" {
		t.Errorf("a FIFO send without a group: %v", err)
	}
}

// TestLongPoll: a waiting ReceiveMessage answers as soon as a message arrives.
func TestLongPoll(t *testing.T) {
	s := NewServer()
	t.Cleanup(s.Close)
	c, ctx, u := newClient(s), context.Background(), s.CreateQueue("poll")
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &u, MessageBody: aws.String("late")})
	}()
	start := time.Now()
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &u, WaitTimeSeconds: 10})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("long poll: %v %v", out, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("long poll answered after %v", d)
	}
}
