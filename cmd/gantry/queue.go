package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

// queueHelp is gantry queue's -h.
var queueHelp = helpText{
	name:        "gantry queue",
	description: "list, redrive or drop the dead letters of the chat inbound queue",
	usage: []string{
		"gantry queue list    [queue flags] [-limit N] [-json]",
		"gantry queue redrive [queue flags] (-all | ID...)",
		"gantry queue drop    [queue flags] (-all | ID...)",
	},
	details: `The dead letter of the chat service's inbound queue: Slack requests whose dispatch failed
-chat-inbound-max-attempts times, or that waited longer than -chat-inbound-max-age. list shows
them (ID, when received, attempts, key); redrive sends them back to the queue, to be delivered again
with fresh attempts; drop deletes them.

The queue flags are serve's, read from the same GANTRY_* variables. The bolt queue is a file one
process holds: stop gantry first (a running gantry keeps it locked). SQS queues can be worked on
while gantry runs; SQS lists a queue only by receiving it, so the dead letters are hidden for
a moment while they are read.`,
	examples: []string{
		"gantry queue list -data-dir /var/lib/gantry",
		"gantry queue redrive -data-dir /var/lib/gantry 12 13",
		"gantry queue drop -chat-inbound-queue sqs -chat-inbound-sqs-queue-url URL -chat-inbound-sqs-dead-letter-url URL -all",
	},
}

// queueFlags are the flags of gantry queue VERB: serve's queue settings and the verb's own.
type queueFlags struct {
	cfg    stack.Config
	server *settings.Table
	limit  *int
	asJSON *bool
	all    *bool
}

func newQueueFlags(fs *flag.FlagSet) *queueFlags {
	q := &queueFlags{cfg: stack.DefaultConfig()}
	q.server = serverSettings(&q.cfg, fs, "data-dir", "chat-inbound-queue", "chat-inbound-queue-path", "chat-inbound-sqs-queue-url", "chat-inbound-sqs-dead-letter-url", "chat-inbound-sqs-endpoint")
	describe(fs, "data-dir", "data folder of the bolt queue")
	q.limit = fs.Int("limit", 100, "list: most dead letters shown (0: all)")
	q.asJSON = fs.Bool("json", false, "list: one JSON object a line, with the body")
	q.all = fs.Bool("all", false, "redrive/drop: every dead letter")
	return q
}

// runQueue lists, redrives and drops the dead letters of the chat inbound queue.
func runQueue(args []string, stdout, stderr io.Writer) int {
	help := func(w io.Writer) {
		fs := flag.NewFlagSet("gantry queue", flag.ContinueOnError)
		newQueueFlags(fs)
		queueHelp.print(w, fs)
	}
	if len(args) == 0 {
		help(stderr)
		return 2
	}
	if isHelpFlag(args[0]) {
		help(stdout)
		return 0
	}
	verb := args[0]
	if verb != "list" && verb != "redrive" && verb != "drop" {
		fmt.Fprintf(stderr, "gantry queue: unknown subcommand %q: list, redrive or drop\n", verb)
		return 2
	}
	fs := flag.NewFlagSet("gantry queue "+verb, flag.ContinueOnError)
	qf := newQueueFlags(fs)
	if code, ok := parseFlags(fs, args[1:], func(w io.Writer) { queueHelp.print(w, fs) }, stdout, stderr, qf.server); !ok {
		return code
	}
	ids := fs.Args()
	switch {
	case verb == "list" && (len(ids) > 0 || *qf.all):
		fmt.Fprintln(stderr, "gantry queue list takes no ids and no -all")
		return 2
	case verb != "list" && *qf.all == (len(ids) > 0):
		fmt.Fprintf(stderr, "gantry queue %s: name the dead letters by id (as gantry queue list shows), or give -all\n", verb)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := stack.OpenChatQueue(qf.cfg, nil)
	if err != nil {
		fmt.Fprintf(stderr, "gantry queue: %v\n", qf.server.Explain(err))
		return 1
	}
	defer q.Close()
	return runQueueVerb(ctx, verb, q.(queue.DeadLetters), ids, qf, stdout, stderr)
}

// runQueueVerb lists, redrives or drops dead letters.
func runQueueVerb(ctx context.Context, verb string, dl queue.DeadLetters, ids []string, qf *queueFlags, stdout, stderr io.Writer) int {
	if verb == "list" {
		list, err := dl.ListDead(ctx, *qf.limit)
		if err != nil {
			fmt.Fprintf(stderr, "gantry queue list: %v\n", err)
			return 1
		}
		printDead(stdout, list, *qf.asJSON)
		return 0
	}
	run, done := dl.RedriveDead, "redriven"
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
