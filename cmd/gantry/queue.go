package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue"
)

const queueUsage = `usage: gantry queue list    [queue flags] [-limit N] [-json]
       gantry queue redrive [queue flags] (-all | ID...)
       gantry queue drop    [queue flags] (-all | ID...)

The dead letter of the chat service's inbound queue: Slack requests whose dispatch failed
-chat-inbound-max-attempts times, or that waited longer than -chat-inbound-max-age. list shows
them (ID, when received, attempts, key); redrive sends them back to the queue, to be delivered again
with fresh attempts; drop deletes them.

The queue flags are serve's, read from the same GANTRY_* variables. The bolt queue is a file one
process holds: stop gantry first (a running gantry keeps it locked). SQS queues can be worked on
while gantry runs; SQS lists a queue only by receiving it, so the dead letters are hidden for
a moment while they are read.

Examples:
  gantry queue list -data-dir /var/lib/gantry
  gantry queue redrive -data-dir /var/lib/gantry 12 13
  gantry queue drop -chat-inbound-queue sqs -chat-inbound-sqs-queue-url URL -chat-inbound-sqs-dead-letter-url URL -all

Flags:`

// runQueue lists, redrives and drops the dead letters of the chat inbound queue.
func runQueue(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprintln(stderr, strings.TrimSuffix(queueUsage, "\n\nFlags:"))
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	verb := args[0]
	if verb != "list" && verb != "redrive" && verb != "drop" {
		fmt.Fprintf(stderr, "gantry queue: unknown subcommand %q: list, redrive or drop\n", verb)
		return 2
	}
	fs := flag.NewFlagSet("gantry queue "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, queueUsage)
		fs.PrintDefaults()
	}
	env := func(name string) string { return "GANTRY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) }
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder of the bolt queue")
	kind := fs.String("chat-inbound-queue", envOr(env("chat-inbound-queue"), events.QueueBolt), "queue kind: bolt or sqs")
	path := fs.String("chat-inbound-queue-path", envOr(env("chat-inbound-queue-path"), ""), "bbolt file of the bolt queue (default <data-dir>/chat-queue.db)")
	queueURL := fs.String("chat-inbound-sqs-queue-url", envOr(env("chat-inbound-sqs-queue-url"), ""), "SQS queue URL (sqs)")
	deadURL := fs.String("chat-inbound-sqs-dead-letter-url", envOr(env("chat-inbound-sqs-dead-letter-url"), ""), "SQS dead-letter queue URL (sqs)")
	endpoint := fs.String("chat-inbound-sqs-endpoint", envOr(env("chat-inbound-sqs-endpoint"), ""), "SQS endpoint URL (empty: AWS's)")
	limit := fs.Int("limit", 100, "list: most dead letters shown (0: all)")
	asJSON := fs.Bool("json", false, "list: one JSON object a line, with the body")
	all := fs.Bool("all", false, "redrive/drop: every dead letter")
	if err := fs.Parse(args[1:]); err != nil {
		return exitCodeOfParse(err)
	}
	ids := fs.Args()
	switch {
	case verb == "list" && (len(ids) > 0 || *all):
		fmt.Fprintln(stderr, "gantry queue list takes no ids and no -all")
		return 2
	case verb != "list" && *all == (len(ids) > 0):
		fmt.Fprintf(stderr, "gantry queue %s: name the dead letters by id (as gantry queue list shows), or give -all\n", verb)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := openDeadLetters(ctx, *kind, *dataDir, *path, *queueURL, *deadURL, *endpoint)
	if err != nil {
		fmt.Fprintf(stderr, "gantry queue: %v\n", err)
		return 1
	}
	defer q.Close()
	dl := q.(queue.DeadLetters)
	switch verb {
	case "list":
		list, err := dl.ListDead(ctx, *limit)
		if err != nil {
			fmt.Fprintf(stderr, "gantry queue list: %v\n", err)
			return 1
		}
		printDead(stdout, list, *asJSON)
		return 0
	default:
		run := dl.RedriveDead
		done := "redriven"
		if verb == "drop" {
			run, done = dl.DropDead, "dropped"
		}
		n, err := run(ctx, ids)
		fmt.Fprintf(stdout, "%d dead letters %s\n", n, done)
		if err != nil {
			fmt.Fprintf(stderr, "gantry queue %s: %v\n", verb, err)
			return 1
		}
		return 0
	}
}

func openDeadLetters(ctx context.Context, kind, dataDir, path, queueURL, deadURL, endpoint string) (queue.Queue, error) {
	switch kind {
	case events.QueueSQS:
		if queueURL == "" || deadURL == "" {
			return nil, errors.New("-chat-inbound-queue sqs needs -chat-inbound-sqs-queue-url and -chat-inbound-sqs-dead-letter-url")
		}
		return sqsqueue.Open(ctx, sqsqueue.Options{QueueURL: queueURL, DeadLetterURL: deadURL, Endpoint: endpoint}, nil)
	case events.QueueBolt:
		if path == "" {
			path = filepath.Join(dataDir, "chat-queue.db")
		}
		q, err := boltqueue.OpenExisting(path)
		if errors.Is(err, boltdb.ErrLocked) {
			return nil, fmt.Errorf("%s is held by a running gantry: stop it first (the bolt queue is one process's file)", path)
		}
		return q, err
	}
	return nil, fmt.Errorf("-chat-inbound-queue: %q is not bolt or sqs", kind)
}

func printDead(w io.Writer, list []queue.DeadMessage, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, m := range list {
			_ = enc.Encode(map[string]any{"id": m.ID, "key": m.Key, "enqueued_at": m.EnqueuedAt.UTC().Format(time.RFC3339), "attempts": m.Attempts, "body": json.RawMessage(validJSON(events.RedactStored(m.Body)))})
		}
		return
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECEIVED\tATTEMPTS\tKIND\tKEY\tBYTES")
	for _, m := range list {
		var env struct {
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(m.Body, &env)
		at := "-"
		if !m.EnqueuedAt.IsZero() {
			at = m.EnqueuedAt.UTC().Format(time.RFC3339)
		}
		attempts := "-"
		if m.Attempts > 0 {
			attempts = fmt.Sprint(m.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", m.ID, at, attempts, env.Kind, m.Key, len(m.Body))
	}
	_ = tw.Flush()
}

// validJSON is b when it is JSON, else b as a JSON string.
func validJSON(b []byte) []byte {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}
