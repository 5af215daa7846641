// Package sqstest is an in-memory fake of AWS SQS that speaks the real wire protocol (JSON 1.0 over
// HTTP, X-Amz-Target: AmazonSQS.<Operation>), so tests run the production AWS SDK code — request
// signing, serialisation, error decoding, the SDK's MD5 checks of bodies — without an AWS account.
//
// It keeps the properties the chat queue depends on: visibility timeouts and their expiry, receive
// counts, long polling, receipt handles that change with each receive, FIFO queues (.fifo) with
// message groups and a 5-minute deduplication interval, and AWS's error codes. Where AWS documents a
// surprise it is kept too: DeleteMessage with a stale receipt handle succeeds without deleting.
// Requests must carry a SigV4 Authorization header scoped to "sqs"; the signature is not checked.
// Queue attributes, redrive policies, batches and message attributes are not modelled.
package sqstest

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/awstest"
)

// The fake's region and account, as they appear in its queue URLs.
const (
	Region    = "us-east-1"
	AccountID = "111122223333"
)

const (
	targetPrefix = "AmazonSQS."
	// Limits and defaults of SQS itself.
	maxBodyBytes        = 256 * 1024
	maxWaitSeconds      = 20
	maxVisibilitySecs   = 12 * 60 * 60
	maxReceiveBatch     = 10
	defaultVisibility   = 30 * time.Second
	fifoDedupeInterval  = 5 * time.Minute
	maxDedupeIDLength   = 128
	maxDelaySeconds     = 900
	pollWakeupInterval  = 20 * time.Millisecond
	receiptHandleLength = 32
)

// Server is a running fake SQS endpoint. Its methods are safe for concurrent use.
type Server struct {
	srv                  *httptest.Server
	*awstest.JSONService // dispatch, FailNext, Requests and the SigV4 check

	mu      sync.Mutex
	wake    *sync.Cond // broadcast on every change and on a timer, for long polls
	counts  ReceiveCounts
	queues  map[string]*fakeQueue
	closed  bool
	stopped chan struct{}
}

type fakeQueue struct {
	name     string
	fifo     bool
	messages []*message          // in send order
	receipts map[string]*message // every handle ever issued, stale ones included
	dedupe   map[string]dedupeRecord
	sent     int
}

type dedupeRecord struct {
	messageID string
	at        time.Time
}

type message struct {
	id           string
	body         string
	group        string
	sent         time.Time
	visibleAt    time.Time
	receiveCount int
	firstReceive time.Time
	receipt      string // the latest handle; older ones are stale
	deleted      bool
}

// ReceiveCounts says through which request fields ReceiveMessage returns ApproximateReceiveCount.
type ReceiveCounts int

const (
	// CountsEitherField is SQS today: MessageSystemAttributeNames or the older AttributeNames.
	CountsEitherField ReceiveCounts = iota
	// CountsLegacyField honours only AttributeNames, as servers before MessageSystemAttributeNames
	// (moto, elasticmq and older SQS-compatible queues).
	CountsLegacyField
	// CountsNever returns no receive count at all.
	CountsNever
)

// SetReceiveCounts changes how ReceiveMessage returns receive counts, to stand in for the SQS
// look-alikes that differ from SQS.
func (s *Server) SetReceiveCounts(c ReceiveCounts) {
	s.mu.Lock()
	s.counts = c
	s.mu.Unlock()
}

// NewServer starts a fake SQS, on 127.0.0.1 port 0, with no queues. Close it when done.
func NewServer() *Server {
	s := &Server{queues: map[string]*fakeQueue{}, stopped: make(chan struct{})}
	s.wake = sync.NewCond(&s.mu)
	s.JSONService = awstest.NewJSON10Service(&s.mu, targetPrefix, map[string]awstest.Operation{
		"SendMessage":             s.sendMessage,
		"ReceiveMessage":          s.receiveMessage,
		"DeleteMessage":           s.deleteMessage,
		"ChangeMessageVisibility": s.changeMessageVisibility,
		"GetQueueAttributes":      s.getQueueAttributes,
	})
	s.RequireSigV4("sqs")
	s.srv = httptest.NewServer(s.JSONService)
	// Long polls wait on s.wake; messages also become visible by the clock alone (a lease running
	// out), so a ticker wakes them to look again.
	go func() {
		t := time.NewTicker(pollWakeupInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stopped:
				return
			case <-t.C:
				s.wake.Broadcast()
			}
		}
	}()
	return s
}

// URL is the endpoint to give the SDK (BaseEndpoint).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server; long polls in progress return empty, later requests fail to connect.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stopped)
	}
	s.mu.Unlock()
	s.wake.Broadcast()
	s.srv.Close()
}

// CreateQueue adds a queue and returns its URL. A name ending in ".fifo" makes a FIFO queue. It
// panics on a name already taken: that is a mistake in the test.
func (s *Server) CreateQueue(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, taken := s.queues[name]; taken {
		panic(fmt.Sprintf("sqstest: queue %s already exists", name))
	}
	s.queues[name] = &fakeQueue{
		name: name, fifo: strings.HasSuffix(name, ".fifo"),
		receipts: map[string]*message{}, dedupe: map[string]dedupeRecord{},
	}
	return s.srv.URL + "/" + AccountID + "/" + name
}

// Bodies returns the bodies of the messages a queue holds, visible or not, in send order.
func (s *Server) Bodies(queueURL string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(queueURL)
	if err != nil {
		panic(err.Message)
	}
	var out []string
	for _, m := range q.messages {
		out = append(out, m.body)
	}
	return out
}

// Sent counts the messages a queue accepted, duplicates a FIFO queue dropped excluded.
func (s *Server) Sent(queueURL string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(queueURL)
	if err != nil {
		panic(err.Message)
	}
	return q.sent
}

func (s *Server) queue(queueURL string) (*fakeQueue, *awstest.Error) {
	u, err := url.Parse(queueURL)
	if queueURL == "" || err != nil {
		return nil, awstest.ClientError("InvalidAddress", "The address %s is not valid for this endpoint.", queueURL)
	}
	name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	q, ok := s.queues[name]
	if !ok {
		return nil, awstest.ClientError("QueueDoesNotExist", "The specified queue does not exist.")
	}
	return q, nil
}

func newReceiptHandle() string {
	b := make([]byte, receiptHandleLength)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func invalidParameter(format string, args ...any) *awstest.Error {
	return awstest.ClientError("InvalidParameterValue", format, args...)
}

func (s *Server) sendMessage(body []byte) (any, *awstest.Error) {
	var in struct {
		QueueUrl               string
		MessageBody            *string
		DelaySeconds           int
		MessageGroupId         string
		MessageDeduplicationId string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	q, e := s.queue(in.QueueUrl)
	if e != nil {
		return nil, e
	}
	switch {
	case in.MessageBody == nil || *in.MessageBody == "":
		return nil, awstest.ClientError("MissingParameter", "The request must contain the parameter MessageBody.")
	case len(*in.MessageBody) > maxBodyBytes:
		return nil, invalidParameter("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", maxBodyBytes)
	case in.DelaySeconds < 0 || in.DelaySeconds > maxDelaySeconds:
		return nil, invalidParameter("Value %d for parameter DelaySeconds is invalid.", in.DelaySeconds)
	}
	now := time.Now()
	if q.fifo {
		switch {
		case in.MessageGroupId == "":
			return nil, awstest.ClientError("MissingParameter", "The request must contain the parameter MessageGroupId.")
		case in.MessageDeduplicationId == "":
			return nil, invalidParameter("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
		case len(in.MessageDeduplicationId) > maxDedupeIDLength:
			return nil, invalidParameter("Value for parameter MessageDeduplicationId is invalid. Reason: too long.")
		case in.DelaySeconds != 0:
			return nil, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", in.DelaySeconds)
		}
		// A duplicate within the interval is accepted and answered like the original, and never
		// delivered: the sender cannot tell it apart.
		if rec, ok := q.dedupe[in.MessageDeduplicationId]; ok && now.Sub(rec.at) < fifoDedupeInterval {
			return s.sendAnswer(q, rec.messageID, *in.MessageBody), nil
		}
	} else if in.MessageGroupId != "" || in.MessageDeduplicationId != "" {
		return nil, invalidParameter("The request include parameter that is not valid for this queue type.")
	}
	m := &message{
		id: awstest.RequestID(), body: *in.MessageBody, group: in.MessageGroupId, sent: now,
		visibleAt: now.Add(time.Duration(in.DelaySeconds) * time.Second),
	}
	q.messages = append(q.messages, m)
	q.sent++
	if q.fifo {
		q.dedupe[in.MessageDeduplicationId] = dedupeRecord{messageID: m.id, at: now}
	}
	s.wake.Broadcast()
	return s.sendAnswer(q, m.id, m.body), nil
}

func (s *Server) sendAnswer(q *fakeQueue, id, body string) any {
	out := map[string]any{"MessageId": id, "MD5OfMessageBody": md5Hex(body)}
	if q.fifo {
		out["SequenceNumber"] = strconv.Itoa(q.sent)
	}
	return out
}

type receivedMessage struct {
	MessageId     string
	ReceiptHandle string
	MD5OfBody     string
	Body          string
	Attributes    map[string]string `json:",omitempty"`
}

func (s *Server) receiveMessage(body []byte) (any, *awstest.Error) {
	var in struct {
		QueueUrl                    string
		MaxNumberOfMessages         *int
		VisibilityTimeout           *int
		WaitTimeSeconds             *int
		AttributeNames              []string
		MessageSystemAttributeNames []string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if _, e := s.queue(in.QueueUrl); e != nil {
		return nil, e
	}
	limit, visibility, wait := 1, defaultVisibility, time.Duration(0)
	if in.MaxNumberOfMessages != nil {
		if limit = *in.MaxNumberOfMessages; limit < 1 || limit > maxReceiveBatch {
			return nil, invalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and %d, if provided.", limit, maxReceiveBatch)
		}
	}
	if in.VisibilityTimeout != nil {
		if *in.VisibilityTimeout < 0 || *in.VisibilityTimeout > maxVisibilitySecs {
			return nil, invalidParameter("Value %d for parameter VisibilityTimeout is invalid.", *in.VisibilityTimeout)
		}
		visibility = time.Duration(*in.VisibilityTimeout) * time.Second
	}
	if in.WaitTimeSeconds != nil {
		if *in.WaitTimeSeconds < 0 || *in.WaitTimeSeconds > maxWaitSeconds {
			return nil, invalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= %d, if provided.", *in.WaitTimeSeconds, maxWaitSeconds)
		}
		wait = time.Duration(*in.WaitTimeSeconds) * time.Second
	}
	want := map[string]bool{}
	names := append(in.AttributeNames, in.MessageSystemAttributeNames...)
	if s.counts == CountsLegacyField {
		names = in.AttributeNames
	}
	for _, n := range names {
		want[n] = true
	}
	if s.counts == CountsNever {
		want["All"] = false
		want["ApproximateReceiveCount"] = false
	}
	deadline := time.Now().Add(wait)
	for {
		// Looked up again after each wait: the lock was let go meanwhile.
		q, e := s.queue(in.QueueUrl)
		if e != nil {
			return nil, e
		}
		if got := q.receive(limit, visibility, want); len(got) > 0 || !time.Now().Before(deadline) || s.closed {
			if len(got) == 0 {
				return struct{}{}, nil // SQS leaves Messages out when there are none
			}
			return map[string]any{"Messages": got}, nil
		}
		s.wake.Wait()
	}
}

func hasFalse(m map[string]bool, k string) bool {
	v, ok := m[k]
	return ok && !v
}

// receive leases up to limit visible messages. In a FIFO queue a group with a message in flight
// delivers nothing more until that message is deleted or visible again, as SQS keeps groups ordered.
func (q *fakeQueue) receive(limit int, visibility time.Duration, want map[string]bool) []receivedMessage {
	now := time.Now()
	busyGroups := map[string]bool{}
	if q.fifo {
		for _, m := range q.messages {
			if m.visibleAt.After(now) && m.receiveCount > 0 {
				busyGroups[m.group] = true
			}
		}
	}
	var out []receivedMessage
	for _, m := range q.messages {
		if len(out) == limit {
			break
		}
		if m.visibleAt.After(now) || busyGroups[m.group] {
			continue
		}
		if q.fifo {
			busyGroups[m.group] = true
		}
		m.receiveCount++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.visibleAt = now.Add(visibility)
		m.receipt = newReceiptHandle()
		q.receipts[m.receipt] = m
		rm := receivedMessage{MessageId: m.id, ReceiptHandle: m.receipt, MD5OfBody: md5Hex(m.body), Body: m.body}
		attrs := map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(m.receiveCount),
			"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		}
		for name, v := range attrs {
			if (want["All"] && !(name == "ApproximateReceiveCount" && hasFalse(want, name))) || want[name] {
				if rm.Attributes == nil {
					rm.Attributes = map[string]string{}
				}
				rm.Attributes[name] = v
			}
		}
		out = append(out, rm)
	}
	return out
}

// leased finds the message of a receipt handle: ReceiptHandleIsInvalid for one never issued.
func (s *Server) leased(queueURL, handle string) (*fakeQueue, *message, *awstest.Error) {
	q, e := s.queue(queueURL)
	if e != nil {
		return nil, nil, e
	}
	if handle == "" {
		return nil, nil, awstest.ClientError("MissingParameter", "The request must contain the parameter ReceiptHandle.")
	}
	m, ok := q.receipts[handle]
	if !ok {
		return nil, nil, awstest.ClientError("ReceiptHandleIsInvalid", "The input receipt handle %q is not a valid receipt handle.", handle)
	}
	return q, m, nil
}

func (s *Server) deleteMessage(body []byte) (any, *awstest.Error) {
	var in struct{ QueueUrl, ReceiptHandle string }
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	q, m, e := s.leased(in.QueueUrl, in.ReceiptHandle)
	if e != nil {
		return nil, e
	}
	// AWS: "you must provide the most recently received ReceiptHandle for the message (otherwise,
	// the request succeeds, but the message will not be deleted)". Deleting twice succeeds too.
	if m.deleted || m.receipt != in.ReceiptHandle {
		return struct{}{}, nil
	}
	m.deleted = true
	for i, other := range q.messages {
		if other == m {
			q.messages = append(q.messages[:i], q.messages[i+1:]...)
			break
		}
	}
	s.wake.Broadcast() // a FIFO group may be free again
	return struct{}{}, nil
}

func (s *Server) changeMessageVisibility(body []byte) (any, *awstest.Error) {
	var in struct {
		QueueUrl, ReceiptHandle string
		VisibilityTimeout       *int
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	_, m, e := s.leased(in.QueueUrl, in.ReceiptHandle)
	if e != nil {
		return nil, e
	}
	if in.VisibilityTimeout == nil || *in.VisibilityTimeout < 0 || *in.VisibilityTimeout > maxVisibilitySecs {
		return nil, invalidParameter("Value for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d.", maxVisibilitySecs)
	}
	now := time.Now()
	switch {
	case m.deleted || m.receipt != in.ReceiptHandle:
		return nil, invalidParameter("Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", in.ReceiptHandle)
	case !m.visibleAt.After(now):
		return nil, awstest.ClientError("MessageNotInflight", "The message referred to isn't in flight.")
	}
	m.visibleAt = now.Add(time.Duration(*in.VisibilityTimeout) * time.Second)
	s.wake.Broadcast()
	return struct{}{}, nil
}

func (s *Server) getQueueAttributes(body []byte) (any, *awstest.Error) {
	var in struct {
		QueueUrl       string
		AttributeNames []string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	q, e := s.queue(in.QueueUrl)
	if e != nil {
		return nil, e
	}
	now := time.Now()
	var visible, inFlight, delayed int
	for _, m := range q.messages {
		switch {
		case !m.visibleAt.After(now):
			visible++
		case m.receiveCount == 0:
			delayed++
		default:
			inFlight++
		}
	}
	all := map[string]string{
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inFlight),
		"ApproximateNumberOfMessagesDelayed":    strconv.Itoa(delayed),
		"VisibilityTimeout":                     strconv.Itoa(int(defaultVisibility / time.Second)),
		"FifoQueue":                             strconv.FormatBool(q.fifo),
		"QueueArn":                              "arn:aws:sqs:" + Region + ":" + AccountID + ":" + q.name,
	}
	out := map[string]string{}
	for _, n := range in.AttributeNames {
		if n == "All" {
			out = all
			break
		}
		v, ok := all[n]
		if !ok {
			return nil, awstest.ClientError("InvalidAttributeName", "Unknown Attribute %s.", n)
		}
		out[n] = v
	}
	return map[string]any{"Attributes": out}, nil
}
