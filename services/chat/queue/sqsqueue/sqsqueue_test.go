package sqsqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/queuetest"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue/sqstest"
)

// testClient points the SDK at the fake with static credentials, so nothing is read from the
// machine's AWS configuration.
func testClient(o *sqs.Options) {
	o.Credentials = credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")
	o.Region = sqstest.Region
	o.Retryer = awstest.ConnectionRetriesOnly()
}

func openOn(t *testing.T, fake *sqstest.Server, queueURL, deadURL string) *Queue {
	t.Helper()
	q, err := Open(context.Background(), Options{QueueURL: queueURL, DeadLetterURL: deadURL, Endpoint: fake.URL(), Region: sqstest.Region},
		logtest.New(t), testClient)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestConformance(t *testing.T) {
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	for _, kind := range []struct{ name, suffix string }{{"Standard", ""}, {"FIFO", ".fifo"}} {
		t.Run(kind.name, func(t *testing.T) {
			n := 0
			queuetest.Run(t, func(t *testing.T) queue.Queue {
				n++
				main := fake.CreateQueue(fmt.Sprintf("conf-%d%s", n, kind.suffix))
				dead := fake.CreateQueue(fmt.Sprintf("conf-%d-dead%s", n, kind.suffix))
				return openOn(t, fake, main, dead)
			})
		})
	}
}

// TestFIFODedupesAcrossReplicas: a Slack retry that reaches another replica is dropped by a FIFO
// queue's deduplication; on a standard queue only the replica that saw it first can refuse it.
func TestFIFODedupesAcrossReplicas(t *testing.T) {
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	ctx := context.Background()
	for _, tc := range []struct {
		suffix string
		want   int
	}{{".fifo", 1}, {"", 2}} {
		main, dead := fake.CreateQueue("replicas"+tc.suffix), fake.CreateQueue("replicas-dead"+tc.suffix)
		a, b := openOn(t, fake, main, dead), openOn(t, fake, main, dead)
		for _, q := range []*Queue{a, b, a} {
			if _, err := q.Enqueue(ctx, "Ev123", []byte(`{"event_id":"Ev123"}`)); err != nil {
				t.Fatal(err)
			}
		}
		if got := fake.Sent(main); got != tc.want {
			t.Errorf("queue %q holds %d copies of one event sent to two replicas, want %d", main, got, tc.want)
		}
		_ = a.Close()
		_ = b.Close()
	}
}

// TestDeadLetterMovesTheMessage: the dead-letter queue gets the message, its key and body intact.
func TestDeadLetterMovesTheMessage(t *testing.T) {
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	main, dead := fake.CreateQueue("dl"), fake.CreateQueue("dl-dead")
	q := openOn(t, fake, main, dead)
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, "poison", []byte{0xff, 0x00, 'x'}); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1, time.Minute, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if string(ds[0].Body) != "\xff\x00x" {
		t.Errorf("a body that is not UTF-8 came back as %q", ds[0].Body)
	}
	if err := q.DeadLetter(ctx, ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if got := fake.Bodies(main); len(got) != 0 {
		t.Errorf("main queue still holds %v", got)
	}
	if got := fake.Bodies(dead); len(got) != 1 || !strings.Contains(got[0], `"k":"poison"`) {
		t.Errorf("dead letter holds %v", got)
	}
	if err := q.DeadLetter(ctx, ds[0].Receipt); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Errorf("second DeadLetter = %v, want ErrStaleReceipt", err)
	}
}

func TestUnsignedRequestsRefused(t *testing.T) {
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	main, dead := fake.CreateQueue("anon"), fake.CreateQueue("anon-dead")
	q := openOn(t, fake, main, dead)
	q.client = sqs.New(sqs.Options{Region: sqstest.Region, BaseEndpoint: aws.String(fake.URL()), Credentials: aws.AnonymousCredentials{}, Retryer: awstest.ConnectionRetriesOnly()})
	_, err := q.Enqueue(context.Background(), "k", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "MissingAuthenticationToken") {
		t.Fatalf("an unsigned SendMessage: %v, want MissingAuthenticationToken", err)
	}
}

func TestErrorsReachTheCaller(t *testing.T) {
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	main, dead := fake.CreateQueue("faults"), fake.CreateQueue("faults-dead")
	q := openOn(t, fake, main, dead)
	ctx := context.Background()
	fake.FailNext(1, 500, "InternalError")
	if _, err := q.Enqueue(ctx, "k", []byte("x")); err == nil {
		t.Fatal("an SQS fault was not reported")
	}
	// Not remembered as enqueued: Slack's retry of it must get in.
	if ok, err := q.Enqueue(ctx, "k", []byte("x")); err != nil || !ok {
		t.Fatalf("the retry after a failed enqueue: %v %v", ok, err)
	}
	_ = q.Close()
	if _, err := q.Receive(ctx, 1, time.Minute, 0); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
}

func TestRegionOf(t *testing.T) {
	for u, want := range map[string]string{
		"https://sqs.eu-west-1.amazonaws.com/123/q":   "eu-west-1",
		"https://us-east-2.queue.amazonaws.com/1/q":   "us-east-2",
		"http://127.0.0.1:4566/000000000000/q":        "",
		"https://sqs.cn-north-1.amazonaws.com.cn/1/q": "cn-north-1",
	} {
		if got := regionOf(u); got != want {
			t.Errorf("regionOf(%s) = %q, want %q", u, got, want)
		}
	}
}

// TestAttemptsWithoutSQSCount: the attempts of a message count up whether the server returns
// ApproximateReceiveCount through MessageSystemAttributeNames, only through the older
// AttributeNames (moto, elasticmq), or not at all (this replica's own count). Before, a missing
// count was attempt 1 for ever, and a failing message never reached the dead letter.
func TestAttemptsWithoutSQSCount(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		counts sqstest.ReceiveCounts
	}{{"EitherField", sqstest.CountsEitherField}, {"LegacyField", sqstest.CountsLegacyField}, {"Never", sqstest.CountsNever}} {
		t.Run(tc.name, func(t *testing.T) {
			fake := sqstest.NewServer()
			t.Cleanup(fake.Close)
			fake.SetReceiveCounts(tc.counts)
			q := openOn(t, fake, fake.CreateQueue("counts"), fake.CreateQueue("counts-dead"))
			defer q.Close()
			if _, err := q.Enqueue(ctx, "Ev1", []byte("body")); err != nil {
				t.Fatal(err)
			}
			for want := 1; want <= 3; want++ {
				ds, err := q.Receive(ctx, 1, time.Minute, 5*time.Second)
				if err != nil || len(ds) != 1 {
					t.Fatalf("receive %d: %v %v", want, ds, err)
				}
				if ds[0].Attempts != want {
					t.Errorf("receive %d: Attempts = %d", want, ds[0].Attempts)
				}
				if err := q.Retry(ctx, ds[0].Receipt, 0); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestEnqueueTooLarge: a message over SQS's 256 KiB (with the envelope) is refused with
// queue.ErrTooLarge, which names the limit, before SQS is asked; one just under it is stored.
func TestEnqueueTooLarge(t *testing.T) {
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	main := fake.CreateQueue("large")
	q := openOn(t, fake, main, fake.CreateQueue("large-dead"))
	defer q.Close()
	ctx := context.Background()
	_, err := q.Enqueue(ctx, "Ev-big", []byte(strings.Repeat("x", 300*1024)))
	if !errors.Is(err, queue.ErrTooLarge) || !strings.Contains(err.Error(), "256 KiB") {
		t.Fatalf("300 KB message: %v, want ErrTooLarge naming 256 KiB", err)
	}
	if n := fake.Sent(main); n != 0 {
		t.Errorf("%d messages sent, want 0", n)
	}
	// The retry of the refused request is not taken for a duplicate.
	if ok, err := q.Enqueue(ctx, "Ev-big", []byte(strings.Repeat("x", 200*1024))); err != nil || !ok {
		t.Fatalf("200 KB message: %v %v", ok, err)
	}
}
