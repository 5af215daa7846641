package chat

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// TestSlowSlackPostsOnce: a write whose answer is slower than the attempt timeout is made once, not
// once per retry, and answers 504: Slack may have performed it. The same holds for send_im and for
// any method the action route names that is not on the idempotent list.
func TestSlowSlackPostsOnce(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.SlackAttemptTimeout = 200 * time.Millisecond; c.SlackRetries = 2 })
	ctx := context.Background()
	f.Inject("chat.postMessage", slacktest.Fault{Delay: time.Hour})
	f.Inject("chat.update", slacktest.Fault{Delay: time.Hour})

	post := ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"channel": "C0GENERAL", "text": "deploy done"}}
	if _, err := svc.Action(ctx, "acme", "pingbot", post); !errors.Is(err, ErrSlackTimeout) {
		t.Errorf("slow post: %v, want a timeout", err)
	}
	if n := len(f.Requests("chat.postMessage")); n != 1 {
		t.Errorf("slow post made %d posts, want 1", n)
	}
	if _, err := svc.Action(ctx, "acme", "pingbot", ActionRequest{Action: "chat.update", Kwargs: map[string]any{}}); !errors.Is(err, ErrSlackTimeout) || len(f.Requests("chat.update")) != 1 {
		t.Errorf("slow chat.update: %v, %d calls, want a timeout after 1", err, len(f.Requests("chat.update")))
	}
	f.Reset()
	if _, err := svc.SendIM(ctx, "acme", "pingbot", "alice@example.com", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"text": "hi"}}); !errors.Is(err, ErrSlackTimeout) {
		t.Errorf("slow send_im: %v, want a timeout", err)
	}
	if n := len(f.Requests("chat.postMessage")); n != 1 {
		t.Errorf("slow send_im made %d posts, want 1", n)
	}
}

// TestLookupsAreRetried: idempotent methods are still retried after a slow answer or a 5xx.
func TestLookupsAreRetried(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.SlackAttemptTimeout = 200 * time.Millisecond; c.SlackRetries = 2 })
	ctx := context.Background()
	f.Inject("users.lookupByEmail", slacktest.Fault{Delay: time.Hour, Times: 1})
	f.Inject("users.lookupByEmail", slacktest.Fault{Status: http.StatusServiceUnavailable, Times: 1})
	if u, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); err != nil || u.ID != "U0BOB0001" {
		t.Fatalf("GetUser = %+v, %v", u, err)
	}
	if n := len(f.Requests("users.lookupByEmail")); n != 3 {
		t.Errorf("users.lookupByEmail called %d times, want 3 (a timeout, a 503, the answer)", n)
	}
	f.Inject("conversations.info", slacktest.Fault{Delay: time.Hour, Times: 1})
	if ch, err := svc.GetChannel(ctx, "acme", "pingbot", "C0GENERAL"); err != nil || ch.ID != "C0GENERAL" {
		t.Fatalf("GetChannel = %+v, %v", ch.ID, err)
	}
	if n := len(f.Requests("conversations.info")); n != 2 {
		t.Errorf("conversations.info called %d times, want 2", n)
	}
}

// TestWriteRetriedWhenNotPerformed: a write is retried after a 429 (Slack refused it) and after a
// failed connect (it never left), so riding out those costs no duplicate.
func TestWriteRetriedWhenNotPerformed(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	f.Inject("chat.postMessage", slacktest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 1, Times: 1})
	res, err := svc.Action(context.Background(), "acme", "pingbot", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"channel": "C0GENERAL", "text": "x"}})
	if err != nil || !res.OK || len(f.Requests("chat.postMessage")) != 2 {
		t.Fatalf("after a 429: %+v, %v, %d calls", res, err, len(f.Requests("chat.postMessage")))
	}

	addr := freeport.Refused(t)
	// The error as the client sees it: a refused connection through net/http.
	_, dialErr := http.Post("http://"+addr+"/chat.postMessage", "application/x-www-form-urlencoded", nil)
	dialErr = redactURL(dialErr)
	var timeout net.Error = &net.OpError{Op: "read", Net: "tcp", Err: context.DeadlineExceeded}
	for _, tt := range []struct {
		method string
		err    error
		want   bool
	}{
		{"chat.postMessage", dialErr, true},
		{"chat.postMessage", timeout, false},
		{"chat.postMessage", errors.New("HTTP 503"), false},
		{"some.futureWrite", errors.New("connection reset by peer"), false},
		{"users.lookupByEmail", timeout, true},
		{"users.lookupByEmail", errors.New("HTTP 503"), true},
	} {
		if got := retryable(tt.method, tt.err); got != tt.want {
			t.Errorf("retryable(%s, %v) = %v, want %v", tt.method, tt.err, got, tt.want)
		}
	}
	if !errors.Is(notRetried("chat.postMessage", timeout), ErrSlackTimeout) || !errors.Is(notRetried("chat.postMessage", errors.New("HTTP 503")), ErrSlackUnavailable) {
		t.Error("notRetried maps a timeout to 504 and other failures to 502")
	}
}
