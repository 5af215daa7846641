package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue/sqstest"
)

// deadLetter stores key as a dead letter of q, as the dispatcher leaves a request it gave up on.
func deadLetter(t *testing.T, q queue.Queue, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, key, []byte(`{"kind":"event","payload":{}}`)); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1, time.Minute, 5*time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive %s: %v %v", key, ds, err)
	}
	if err := q.DeadLetter(ctx, ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
}

func queueCmd(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := dispatch(append([]string{"queue"}, args...), &stdout, &stderr); code != wantCode {
		t.Fatalf("gantry queue %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String()
}

// idOf reads the id of key from gantry queue list's table.
func idOf(t *testing.T, list, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^(\S+)\s+.*\s` + regexp.QuoteMeta(key) + `\s`).FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("%s not listed:\n%s", key, list)
	}
	return m[1]
}

// TestQueueCommandBolt: gantry queue list, redrive and drop on the bolt queue of a data folder, and
// a clear refusal while a gantry holds the file.
func TestQueueCommandBolt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "chat-queue.db")
	q, err := boltqueue.Open(path, boltqueue.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadLetter(t, q, "event:Ev0DEAD001")
	deadLetter(t, q, "event:Ev0DEAD002")
	out := queueCmd(t, 1, "list", "-data-dir", dir)
	if !strings.Contains(out, "held by a running gantry: stop it first") {
		t.Errorf("list while the file is held: %s", out)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	list := queueCmd(t, 0, "list", "-data-dir", dir)
	for _, want := range []string{"ID", "ATTEMPTS", "event:Ev0DEAD001", "event:Ev0DEAD002", " event "} {
		if !strings.Contains(list, want) {
			t.Errorf("list lacks %q:\n%s", want, list)
		}
	}
	if out := queueCmd(t, 0, "list", "-data-dir", dir, "-json"); strings.Count(out, `"key":"event:Ev0DEAD00`) != 2 || !strings.Contains(out, `"body":{"kind":"event"`) {
		t.Errorf("list -json:\n%s", out)
	}
	if out := queueCmd(t, 1, "redrive", "-data-dir", dir, "999"); !strings.Contains(out, "no dead letter 999") {
		t.Errorf("redrive of an unknown id: %s", out)
	}
	queueCmd(t, 2, "redrive", "-data-dir", dir) // neither ids nor -all
	if out := queueCmd(t, 0, "redrive", "-data-dir", dir, idOf(t, list, "event:Ev0DEAD001")); !strings.Contains(out, "1 dead letters redriven") {
		t.Errorf("redrive: %s", out)
	}
	if out := queueCmd(t, 0, "drop", "-data-dir", dir, "-all"); !strings.Contains(out, "1 dead letters dropped") {
		t.Errorf("drop: %s", out)
	}
	if out := queueCmd(t, 0, "list", "-data-dir", dir); !strings.Contains(out, "no dead letters") {
		t.Errorf("list after drop: %s", out)
	}
	// The redriven request is in the queue again, due at once, with fresh attempts.
	q, err = boltqueue.Open(path, boltqueue.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ds, err := q.Receive(context.Background(), 2, time.Minute, time.Second)
	if err != nil || len(ds) != 1 || ds[0].Key != "event:Ev0DEAD001" || ds[0].Attempts != 1 {
		t.Errorf("after redrive the queue holds %+v (%v)", ds, err)
	}
	if out := queueCmd(t, 1, "list", "-data-dir", t.TempDir()); !strings.Contains(out, "no chat queue at") {
		t.Errorf("list of a folder without a queue: %s", out)
	}
}

// TestQueueCommandSQS: the same commands on an SQS dead-letter queue (the wire-protocol fake).
func TestQueueCommandSQS(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", sqstest.Region)
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	mainURL, deadURL := fake.CreateQueue("cli"), fake.CreateQueue("cli-dead")
	q, err := sqsqueue.Open(context.Background(), sqsqueue.Options{QueueURL: mainURL, DeadLetterURL: deadURL, Endpoint: fake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	deadLetter(t, q, "event:Ev0SQSDEAD1")
	deadLetter(t, q, "event:Ev0SQSDEAD2")
	flags := []string{"-chat-inbound-queue", "sqs", "-chat-inbound-sqs-queue-url", mainURL, "-chat-inbound-sqs-dead-letter-url", deadURL, "-chat-inbound-sqs-endpoint", fake.URL()}
	list := queueCmd(t, 0, append([]string{"list"}, flags...)...)
	if !strings.Contains(list, "event:Ev0SQSDEAD1") || !strings.Contains(list, "event:Ev0SQSDEAD2") {
		t.Fatalf("list:\n%s", list)
	}
	if out := queueCmd(t, 0, append(append([]string{"redrive"}, flags...), idOf(t, list, "event:Ev0SQSDEAD2"))...); !strings.Contains(out, "1 dead letters redriven") {
		t.Errorf("redrive: %s", out)
	}
	if got := fake.Bodies(mainURL); len(got) != 1 || !strings.Contains(got[0], "Ev0SQSDEAD2") {
		t.Errorf("the queue holds %q after redrive", got)
	}
	if out := queueCmd(t, 0, append([]string{"drop", "-all"}, flags...)...); !strings.Contains(out, "1 dead letters dropped") {
		t.Errorf("drop: %s", out)
	}
	if got := fake.Bodies(deadURL); len(got) != 0 {
		t.Errorf("the dead-letter queue holds %q after drop", got)
	}
}

// TestQueueListHidesSlackToken: a dead letter stored before gantry stripped Slack's verification
// token at enqueue (a request, and a fanned-out call's origin) is listed by `gantry queue list
// -json` without it. Before, the token was shown.
func TestQueueListHidesSlackToken(t *testing.T) {
	dir := t.TempDir()
	q, err := boltqueue.Open(filepath.Join(dir, "chat-queue.db"), boltqueue.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for key, body := range map[string]string{
		"event:Ev0OLDTOK1":    `{"kind":"event","app_id":"A0PING001","payload":{"token":"s3cr3t-verification","event_id":"Ev0OLDTOK1","event":{"type":"message"}}}`,
		"slash:1234.5678#0.0": `{"kind":"call","app_id":"A0PING001","payload":{"kind":"slash_command","handler":"slash.deploy","payload":{"command":"/deploy"},"origin":{"token":"s3cr3t-verification","command":"/deploy"}}}`,
	} {
		if _, err := q.Enqueue(ctx, key, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		ds, err := q.Receive(ctx, 1, time.Minute, 5*time.Second)
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v %v", ds, err)
		}
		if err := q.DeadLetter(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	out := queueCmd(t, 0, "list", "-data-dir", dir, "-json")
	if strings.Contains(out, "s3cr3t") || strings.Contains(out, `"token"`) {
		t.Errorf("list -json shows Slack's token:\n%s", out)
	}
	for _, want := range []string{`"event_id":"Ev0OLDTOK1"`, `"command":"/deploy"`} {
		if !strings.Contains(out, want) {
			t.Errorf("list -json lost %s:\n%s", want, out)
		}
	}
}
