package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/slacksig"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// maxSlackBody bounds a Slack request body. Slack's payloads are a few kilobytes; its largest
// (interactive components with a whole view state) stay far below this.
const maxSlackBody = 1 << 20

// maxSSLCheckBody bounds the body of an unsigned request to a slash command URL when the legacy
// verification token is not accepted: the only such request Slack sends is its certificate check,
// "ssl_check=1&token=<token>", a few dozen bytes.
const maxSSLCheckBody = 1 << 10

// slackReceivers are the paths Slack sends requests to: Omnibot's and gantry's spelling of each.
var slackReceivers = map[string]chatv1.SlackRequestKind{
	"/api/v1/slack/event":         chatv1.SlackRequestKind_SLACK_REQUEST_KIND_EVENT,
	"/api/v1/chat/event":          chatv1.SlackRequestKind_SLACK_REQUEST_KIND_EVENT,
	"/api/v1/slack/slash_command": chatv1.SlackRequestKind_SLACK_REQUEST_KIND_SLASH_COMMAND,
	"/api/v1/chat/slash_command":  chatv1.SlackRequestKind_SLACK_REQUEST_KIND_SLASH_COMMAND,
	"/api/v1/slack/interactive":   chatv1.SlackRequestKind_SLACK_REQUEST_KIND_INTERACTIVE,
	"/api/v1/chat/interactive":    chatv1.SlackRequestKind_SLACK_REQUEST_KIND_INTERACTIVE,
}

// Kinds of refused Slack request: the suffix of their counter http.ingress.slack.refused.<kind> and
// the "refusal" field of their (sampled) log line.
const (
	slackMissingSignature = "missing_signature" // no X-Slack-Signature/-Request-Timestamp
	slackBadTimestamp     = "bad_timestamp"     // not decimal Unix seconds
	slackStaleTimestamp   = "stale_timestamp"   // outside the replay window
	slackBadSignature     = "bad_signature"     // malformed, or the chat service's HMAC check failed
	slackOverloaded       = "overloaded"        // -slack-max-unverified-in-flight bodies already in flight
	slackBodyTooLarge     = "body_too_large"    // over the 1 MiB cap (or the ssl_check budget)
	slackUnreadableBody   = "unreadable_body"   // the client broke off
	slackBadRequest       = "bad_request"       // verified, but the chat service cannot read it
)

var slackRefusalKinds = []string{slackMissingSignature, slackBadTimestamp, slackStaleTimestamp, slackBadSignature,
	slackOverloaded, slackBodyTooLarge, slackUnreadableBody, slackBadRequest}

// slackEdge receives Slack's requests. Slack signs them with a secret only the chat service holds,
// so the gateway cannot verify a body; what it can check without the secret, it checks before it
// reads one byte of the body: the signature headers are present and well formed and the timestamp
// is inside the replay window (slacksig.CheckHeaders, the same checks the chat service runs after).
// A body is then read only within a fixed number of slots (-slack-max-unverified-in-flight): beyond
// them a request gets 503 with Retry-After at once, so unsigned floods cost neither memory nor time.
// The call to the chat service then goes as a REST call does (upstreamCalls): with the request id
// and the other metadata of the REST mux, and bounded by the upstream deadline, so a frozen chat host
// answers Slack 504 (which Slack retries) rather than holding it until it gives up.
type slackEdge struct {
	chat     chatv1.ChatServiceClient
	calls    *upstreamCalls
	slots    chan struct{}
	skew     time.Duration
	unsigned bool // the legacy verification token is accepted: unsigned bodies are read too
	now      func() time.Time
	inFlight *stats.Gauge
	refused  map[string]*stats.Counter
	log      *logging.Sampler
}

func newSlackEdge(cfg Config, st *stats.Store, calls *upstreamCalls, logger *zap.Logger) *slackEdge {
	skew := cfg.SlackMaxSkew
	if skew <= 0 {
		skew = 5 * time.Minute
	}
	e := &slackEdge{calls: calls, slots: make(chan struct{}, max(cfg.SlackMaxUnverifiedInFlight, 1)), skew: skew, unsigned: cfg.SlackAcceptUnsigned,
		now: time.Now, inFlight: st.Gauge("http.ingress.slack.unverified_in_flight"), refused: map[string]*stats.Counter{},
		log: logging.NewSampler(logger, 0, 0)}
	for _, k := range slackRefusalKinds {
		e.refused[k] = st.Counter("http.ingress.slack.refused." + k)
	}
	return e
}

// wrap answers Slack's receiver paths itself and passes every other request to next. It stands
// before limitBody, which would read a whole body before any check.
func (e *slackEdge) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kind, ok := slackReceivers[r.URL.Path]; ok && r.Method == http.MethodPost && e.chat != nil {
			e.serve(w, r, kind)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// registerSlackReceivers mounts the receivers beside the generated routes (so other methods get the
// mux's answer). They are not generated from the proto because Slack's signature covers the exact
// body bytes, which grpc-gateway's decoding (a form becomes fields) would not keep: the handler passes
// the body through unchanged with the three Slack headers, and the chat service verifies and answers.
// The retry headers only feed stats.
func (e *slackEdge) registerSlackReceivers(mux *runtime.ServeMux, chat chatv1.ChatServiceClient) error {
	e.chat = chat
	for path, kind := range slackReceivers {
		if err := mux.HandlePath(http.MethodPost, path, func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
			e.serve(w, r, kind)
		}); err != nil {
			return err
		}
	}
	return nil
}

func slackFailure(w http.ResponseWriter, code int, msg string) {
	writeJSONError(w, code, msg, map[string]any{"status": "failure"})
}

// refuse answers a refusal, counts it and logs it sampled, with the request's own values cut. A
// refusal before the body was read closes the connection, so the server does not read the body to
// reuse it either.
func (e *slackEdge) refuse(w http.ResponseWriter, r *http.Request, kind string, code int, msg string, beforeBody bool) {
	e.refused[kind].Inc()
	e.log.Info(kind, "refused a Slack request", logging.Untrusted("path", r.URL.Path), logging.Untrusted("user_agent", r.UserAgent()),
		zap.String("remote_addr", r.RemoteAddr), zap.Int("status", code), zap.String("reason", msg))
	if beforeBody {
		w.Header().Set("Connection", "close")
	}
	slackFailure(w, code, msg)
}

func (e *slackEdge) serve(w http.ResponseWriter, r *http.Request, kind chatv1.SlackRequestKind) {
	ts, sig := r.Header.Get(slacksig.HeaderTimestamp), r.Header.Get(slacksig.HeaderSignature)
	budget := int64(maxSlackBody)
	if ts == "" && sig == "" {
		switch {
		case e.unsigned:
			// Legacy verification-token mode: the token is in the body, so the body must be read;
			// it is read within the same slots and cap as a signed one.
		case kind == chatv1.SlackRequestKind_SLACK_REQUEST_KIND_SLASH_COMMAND:
			budget = maxSSLCheckBody // Slack's certificate check: the chat service answers it
		default:
			e.refuse(w, r, slackMissingSignature, http.StatusUnauthorized, slacksig.ErrMissing.Error(), true)
			return
		}
	} else if _, err := slacksig.CheckHeaders(ts, sig, e.now(), e.skew); err != nil {
		refusal := slackBadSignature
		switch {
		case errors.Is(err, slacksig.ErrMissing):
			refusal = slackMissingSignature
		case errors.Is(err, slacksig.ErrTimestamp):
			refusal = slackBadTimestamp
		case errors.Is(err, slacksig.ErrStale):
			refusal = slackStaleTimestamp
		}
		e.refuse(w, r, refusal, http.StatusUnauthorized, err.Error(), true)
		return
	}
	if r.ContentLength > budget {
		e.refuse(w, r, slackBodyTooLarge, http.StatusRequestEntityTooLarge, "request body too large", true)
		return
	}
	body, ok := e.readBody(w, r, budget)
	if !ok {
		return
	}
	retry, _ := strconv.Atoi(r.Header.Get("X-Slack-Retry-Num"))
	e.forward(w, r, &chatv1.ReceiveSlackRequestRequest{
		Kind: kind, Body: body, ContentType: r.Header.Get("Content-Type"),
		Signature: sig, Timestamp: ts,
		RetryNum: int32(min(max(retry, 0), 100)), RetryReason: r.Header.Get("X-Slack-Retry-Reason"),
	})
}

// forward passes a request whose body was read to the chat service, as the REST mux would pass a
// call of the receiver's path, and writes its answer.
func (e *slackEdge) forward(w http.ResponseWriter, r *http.Request, req *chatv1.ReceiveSlackRequestRequest) {
	ctx, cancel, err := e.calls.context(r, chatv1.ChatService_ReceiveSlackRequest_FullMethodName, r.URL.Path)
	if err != nil {
		// A header the REST mux could not pass on either (a malformed -bin header named by
		// -forward-headers): its answer too.
		slackFailure(w, http.StatusBadRequest, status.Convert(err).Message())
		return
	}
	defer cancel()
	res, err := e.chat.ReceiveSlackRequest(ctx, req)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.Unauthenticated:
			e.refused[slackBadSignature].Inc() // the chat service logs it (sampled)
		case codes.InvalidArgument:
			e.refused[slackBadRequest].Inc()
		}
		slackFailure(w, runtime.HTTPStatusFromCode(st.Code()), st.Message())
		return
	}
	if res.GetContentType() != "" {
		w.Header().Set("Content-Type", res.GetContentType())
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := int(res.GetStatus())
	if code < 200 || code > 599 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_, _ = w.Write(res.GetBody())
}

// readBody reads an unverified body of at most budget bytes within a slot; with every slot taken it
// answers 503 at once. The slot is held while the body arrives, the part a client paces: a slow or
// large body holds one slot, never memory beyond budget per slot.
func (e *slackEdge) readBody(w http.ResponseWriter, r *http.Request, budget int64) ([]byte, bool) {
	select {
	case e.slots <- struct{}{}:
	default:
		w.Header().Set(wirekeys.RetryAfter, "1")
		e.refuse(w, r, slackOverloaded, http.StatusServiceUnavailable, "too many unverified Slack requests in flight; retry later", true)
		return nil, false
	}
	e.inFlight.Add(1)
	defer func() {
		e.inFlight.Add(-1)
		<-e.slots
	}()
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, budget))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			e.refuse(w, r, slackBodyTooLarge, http.StatusRequestEntityTooLarge, "request body too large", false)
			return nil, false
		}
		e.refuse(w, r, slackUnreadableBody, http.StatusBadRequest, "could not read the request body", false)
		return nil, false
	}
	return buf.Bytes(), true
}
