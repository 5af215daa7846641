package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue/sqstest"
	"github.com/gantry-dev/gantry/services/chat/slackfake"
)

// TestInboundSQSTwoReplicas: two chat replicas share a FIFO queue on the SQS fake. Each signed event
// goes to one replica and Slack's retry of it to the other; every event reaches the backend once,
// and both replicas dispatch.
func TestInboundSQSTwoReplicas(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", sqstest.Region)
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	queueURL, deadURL := fake.CreateQueue("chat-inbound.fifo"), fake.CreateQueue("chat-inbound-dead.fifo")
	f := slackfake.StartWorkspace(t)
	be := startBackend(t, `{}`)
	sqsMode := func(c *stack.Config) {
		c.Chat.Inbound.Queue = events.QueueSQS
		c.Chat.Inbound.SQSQueueURL, c.Chat.Inbound.SQSDeadLetterURL = queueURL, deadURL
		c.Chat.Inbound.SQSEndpoint = fake.URL()
	}
	replicas := []*testStack{startInbound(t, f, be, sqsMode), startInbound(t, f, be, sqsMode)}

	const n = 30
	for i := range n {
		id := fmt.Sprintf("Ev0SQS%04d", i)
		first, other := replicas[i%2], replicas[(i+1)%2]
		body := messageEvent(id, "<@U0BOT0001> ping")
		first.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, time.Now(), 0).must(t, 200)
		other.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, time.Now(), 1).must(t, 200)
	}
	waitFor(t, "every event at the backend", 30*time.Second, func() bool { return len(countEventIDs(be.calls())) == n })
	time.Sleep(500 * time.Millisecond) // a second delivery, if any, would show by now
	for id, c := range countEventIDs(be.calls()) {
		if c != 1 {
			t.Errorf("%s dispatched %d times, want once", id, c)
		}
	}
	total := 0
	for i, r := range replicas {
		d := statValue(t, r, "chat.inbound.event.dispatched")
		if d == 0 {
			t.Errorf("replica %d dispatched nothing: the queue is not shared", i)
		}
		total += d
	}
	if total != n {
		t.Errorf("the replicas dispatched %d events together, want %d", total, n)
	}
	if got := fake.Sent(queueURL); got != n {
		t.Errorf("the FIFO queue accepted %d messages for %d events sent twice each, want %d", got, n, n)
	}
}

// statValue reads one counter of a stack's /stats (0 when absent).
func statValue(t *testing.T, s *testStack, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `: (\d+)$`).FindSubmatch(s.admin("/stats?filter=" + name).body)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}
