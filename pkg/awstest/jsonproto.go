package awstest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ContentType is the media type of the AWS JSON 1.1 protocol, both ways.
const ContentType = "application/x-amz-json-1.1"

// ContentType10 is the media type of the AWS JSON 1.0 protocol (SQS, DynamoDB): the same framing as
// 1.1, under another name.
const ContentType10 = "application/x-amz-json-1.0"

// maxRequestBytes bounds what a fake reads of one request; real AWS requests are far smaller.
const maxRequestBytes = 1 << 20

// Error is an AWS error answer: its HTTP status, the code the SDK reads from "__type", and a message.
type Error struct {
	Status  int
	Code    string
	Message string
}

// NewError is an error answer with any status (5xx for the service's own faults).
func NewError(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// ClientError is a 400 error answer, the status AWS gives every client mistake.
func ClientError(code, format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, code, format, args...)
}

// Decode reads a request body into v, answering SerializationException as AWS does.
func Decode(body []byte, v any) *Error {
	if err := json.Unmarshal(body, v); err != nil {
		return ClientError("SerializationException", "cannot decode request: %v", err)
	}
	return nil
}

// Operation answers one request body with a value to encode as JSON, or an error answer. It runs
// with the fake's lock held, so it may read and change the fake's state freely; one that long-polls
// (SQS ReceiveMessage) waits on a sync.Cond of that lock, which lets the other requests in meanwhile.
type Operation func(body []byte) (any, *Error)

// JSONService is the server side of the AWS JSON 1.1 (or 1.0) protocol (POST, X-Amz-Target:
// <prefix><Operation>), shared by the in-repo fakes of KMS, ACM Private CA and SQS: dispatch, request
// counting and injected faults, so each fake holds only its service's own behaviour.
type JSONService struct {
	mu           *sync.Mutex
	targetPrefix string
	operations   map[string]Operation
	requests     map[string]int
	failLeft     int
	failWith     Error
	contentType  string
	sigV4Service string
	// latency delays every answer (SetLatency); hold, when set, holds every request until closed
	// (Hold). Both are waited out before the lock, so concurrent requests wait in parallel.
	latency atomic.Int64
	hold    atomic.Pointer[<-chan struct{}]
}

// NewJSONService serves operations under targetPrefix ("TrentService."). mu is the fake's state lock:
// every operation runs holding it.
func NewJSONService(mu *sync.Mutex, targetPrefix string, operations map[string]Operation) *JSONService {
	return &JSONService{mu: mu, targetPrefix: targetPrefix, operations: operations, requests: map[string]int{}, contentType: ContentType}
}

// NewJSON10Service is NewJSONService for a service of the AWS JSON 1.0 protocol (SQS).
func NewJSON10Service(mu *sync.Mutex, targetPrefix string, operations map[string]Operation) *JSONService {
	j := NewJSONService(mu, targetPrefix, operations)
	j.contentType = ContentType10
	return j
}

// RequireSigV4 refuses (403) a request without a SigV4 Authorization header scoped to service
// ("sqs"). The signature itself is not checked: this catches a client that signs nothing or was
// built for another service, not a wrong secret.
func (j *JSONService) RequireSigV4(service string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.sigV4Service = service
}

// FailNext makes the next n requests, whatever their operation, answer with HTTP status and the AWS
// error code, to test how callers handle faults (throttling, internal errors, ...).
func (j *JSONService) FailNext(n int, status int, code string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failLeft = n
	j.failWith = Error{Status: status, Code: code, Message: "injected failure"}
}

// SetLatency delays every answer by d (0: none), as a real service's round trip does: the wait is
// outside the fake's lock, so concurrent requests wait it out in parallel and a client's concurrency
// shows (benchmarks of the import against a KMS 10 ms away). A request whose client gives up stops
// waiting.
func (j *JSONService) SetLatency(d time.Duration) { j.latency.Store(int64(d)) }

// Hold makes every request received from now on wait, before it is answered (and before the fake's
// lock), until ch is closed; nil stops holding. A test holds the service to observe its caller while
// a call is in flight, for as long as it needs, with no timing involved. Requests counts a held
// request as soon as it arrives.
func (j *JSONService) Hold(ch <-chan struct{}) {
	if ch == nil {
		j.hold.Store(nil)
		return
	}
	j.hold.Store(&ch)
}

// Requests counts the requests received for an operation, including those answered by FailNext, so
// retries can be counted too.
func (j *JSONService) Requests(op string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.requests[op]
}

func (j *JSONService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op, known := strings.CutPrefix(target, j.targetPrefix)
	// Read before locking, so a slow client cannot stall the other requests.
	body, readErr := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
	hold := j.hold.Load() // before counting: a request counted is held if Hold was set then
	j.mu.Lock()
	j.requests[op]++ // on arrival: a held or delayed request is counted already
	j.mu.Unlock()
	if hold != nil {
		select {
		case <-*hold:
		case <-r.Context().Done():
			return
		}
	}
	if d := time.Duration(j.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failLeft > 0 {
		j.failLeft--
		j.writeError(w, &j.failWith)
		return
	}
	if j.sigV4Service != "" {
		auth := r.Header.Get("Authorization")
		if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || r.Header.Get("X-Amz-Date") == "" {
			j.writeError(w, NewError(http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token"))
			return
		}
		if !strings.Contains(auth, "/"+j.sigV4Service+"/aws4_request") {
			j.writeError(w, NewError(http.StatusForbidden, "SignatureDoesNotMatch", "Credential should be scoped to correct service: '%s'.", j.sigV4Service))
			return
		}
	}
	handler, ok := j.operations[op]
	if r.Method != http.MethodPost || !known || !ok {
		j.writeError(w, ClientError("UnknownOperationException", "unknown operation %q", target))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != j.contentType {
		j.writeError(w, ClientError("SerializationException", "Content-Type must be %s", j.contentType))
		return
	}
	if readErr != nil {
		j.writeError(w, ClientError("SerializationException", "read request: %v", readErr))
		return
	}
	out, apiErr := handler(body)
	if apiErr != nil {
		j.writeError(w, apiErr)
		return
	}
	data, err := json.Marshal(out)
	if err != nil {
		j.writeError(w, NewError(http.StatusInternalServerError, "InternalFailure", "encode response: %v", err))
		return
	}
	j.writeHeaders(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (j *JSONService) writeHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", j.contentType)
	w.Header().Set("X-Amzn-RequestId", RequestID())
}

func (j *JSONService) writeError(w http.ResponseWriter, e *Error) {
	data, _ := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{e.Code, e.Message})
	j.writeHeaders(w)
	w.WriteHeader(e.Status)
	_, _ = w.Write(data)
}

// RequestID is a random UUID (version 4), the shape of AWS request and resource ids.
func RequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
