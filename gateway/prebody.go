package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/gateway/webui"
	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// Nothing unauthenticated may cost more than a small request. Before a request's body is read, the
// gateway finds the route it goes to (the same router as the REST muxes, built from the routes and
// access policies the protos declare, read through pkg/rpcpolicy) and, for a route that is not public,
// asks the service's own rule (Config.RefuseBeforeBody) whether the call would be refused whatever its
// body: a secrets call that carries no credential at all, a chat call its access control denies. Such
// a call gets the service's answer at once; its body is never read, decoded or sent upstream.
//
// Credentials that are present are verified by the service, which holds the keys: before a secrets
// call's body larger than -large-body-threshold is read, the gateway asks the secrets service whether
// it would accept the call's credentials (credentialChecker), and answers its refusal at once. A large
// body that passes (or a chat call's) then needs one of -large-bodies-in-flight slots for as long as
// its request runs; a request that finds none gets 503 with Retry-After before its body is read.
// Small bodies, and requests without a body, are neither checked first nor wait for a slot: they cost
// what any small request costs.

// PreBodyCall is a REST call as the gateway knows it before reading the body: the gRPC method its
// route maps to, the route's path parameters and the request headers as the service would receive
// them in metadata.
type PreBodyCall struct {
	// FullMethod is the gRPC method, /package.Service/Method.
	FullMethod string
	// Template is the path template of the route the request matched (the proto's google.api.http
	// binding), which the service receives as wirekeys.ProxyRoute.
	Template string
	// Params are the path parameters of the route, as the REST router extracted them.
	Params map[string]string
	// Header returns the values of a header under its lower-case metadata name and whether the gateway
	// forwards that header to the services at all (only an allow-list reaches them).
	Header func(name string) (values []string, forwarded bool)
}

// RefuseBeforeBody answers, before a body is read, whether a call to a non-public route would be
// refused whatever its body: the gRPC status the service would refuse it with, or nil to let it
// through. The process builds it from the services' own rules (internal/stack); nil refuses nothing.
type RefuseBeforeBody func(call PreBodyCall) error

// gatedRoute is what the pre-body router found for a request.
type gatedRoute struct {
	fullMethod string
	public     bool
	// secrets: a route of the secrets service, whose credentials the gateway can have checked
	// before a large body (credentialChecker).
	secrets bool
}

// routeFinder is a ServeMux of the same routes, in the same order, as a service's REST mux, whose
// handlers only say which route matched, so that it matches exactly as the real router does.
type routeFinder struct {
	secrets, chat *runtime.ServeMux
}

// foundRoute is the ResponseWriter the finder's handlers record their route in; nothing is written.
type foundRoute struct {
	http.ResponseWriter
	route    *gatedRoute
	template string
	params   map[string]string
}

func newRouteFinder() (*routeFinder, error) {
	build := func(tables []rpcpolicy.Table, order [][]string, public []string, secrets bool) (*runtime.ServeMux, error) {
		mux := runtime.NewServeMux(
			runtime.WithRoutingErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, _ http.ResponseWriter, _ *http.Request, _ int) {
			}),
			runtime.WithErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, _ http.ResponseWriter, _ *http.Request, _ error) {
			}),
		)
		for i, table := range tables {
			for _, method := range order[i] {
				policy := table[method]
				route := &gatedRoute{fullMethod: method, public: policy.Access == optionsv1.Access_ACCESS_PUBLIC ||
					policy.Access == optionsv1.Access_ACCESS_SLACK_SIGNED, secrets: secrets}
				for _, r := range policy.Routes {
					if err := mux.HandlePath(r.Method, r.Template, recordRoute(route, r.Template)); err != nil {
						return nil, fmt.Errorf("gateway: route %s %s of %s: %w", r.Method, r.Template, method, err)
					}
				}
			}
		}
		// Paths served beside the generated routes (the Slack receivers, registered after them as in
		// mainMux): public, they authenticate by signature.
		for _, path := range public {
			if err := mux.HandlePath(http.MethodPost, path, recordRoute(&gatedRoute{public: true}, path)); err != nil {
				return nil, err
			}
		}
		return mux, nil
	}
	secretsSD := secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService")
	chatSD := chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService")
	secretsTable, err := rpcpolicy.For(secretsSD)
	if err != nil {
		return nil, err
	}
	chatTable, err := rpcpolicy.For(chatSD)
	if err != nil {
		return nil, err
	}
	var f routeFinder
	if f.secrets, err = build([]rpcpolicy.Table{secretsTable}, [][]string{methodOrder(secretsSD.FullName(), secretsSD.Methods())}, nil, true); err != nil {
		return nil, err
	}
	var receivers []string
	for path := range slackReceivers {
		receivers = append(receivers, path)
	}
	if f.chat, err = build([]rpcpolicy.Table{chatTable}, [][]string{methodOrder(chatSD.FullName(), chatSD.Methods())}, receivers, false); err != nil {
		return nil, err
	}
	return &f, nil
}

func recordRoute(route *gatedRoute, template string) runtime.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request, params map[string]string) {
		if found, ok := w.(*foundRoute); ok {
			found.route, found.template, found.params = route, template, params
		}
	}
}

// find returns the route a request goes to, nil when it goes to none (the REST mux answers 404 or
// 405 without reading the body) or to a page of the web UI. It routes a copy of the request without
// its body: grpc-gateway parses a form body to route a POST to a GET route, which must not happen
// here.
func (f *routeFinder) find(r *http.Request) (*gatedRoute, string, map[string]string) {
	if webui.Serves(r.URL.Path) {
		return nil, "", nil
	}
	var mux *runtime.ServeMux
	switch {
	case strings.HasPrefix(r.URL.Path, routePrefixes[upstream.ClusterSecrets]):
		mux = f.secrets
	case strings.HasPrefix(r.URL.Path, routePrefixes[upstream.ClusterChat]):
		mux = f.chat
	default:
		return nil, "", nil // only /openapi/{file}, public, is served there
	}
	bodiless := *r
	bodiless.Body, bodiless.ContentLength = http.NoBody, 0
	found := &foundRoute{}
	mux.ServeHTTP(found, &bodiless)
	return found.route, found.template, found.params
}

// bodyGate is the middleware of the REST listener that decides before the body (see the comment at
// the top of this file).
type bodyGate struct {
	finder *routeFinder
	refuse RefuseBeforeBody
	// credentials checks a secrets call's credentials before a large body; nil without a secrets
	// cluster.
	credentials *credentialChecker
	maxBody     int64
	threshold   int64
	slots       chan struct{}
	forwarded   func(key string) (string, bool)
	renderError runtime.ErrorHandlerFunc
	logger      *zap.Logger
	sampler     refusalSampler
	// audit records the refusals on the process's trail (the service never sees these calls), at
	// most auditRefusals' burst a second; nil records none.
	audit         *audit.Sink
	auditRefusals audit.RefusalLimiter

	refused, overflowed *stats.Counter
}

func (g *Gateway) newBodyGate(forwarded []string, secrets grpc.ClientConnInterface) (*bodyGate, error) {
	finder, err := newRouteFinder()
	if err != nil {
		return nil, err
	}
	slots := make(chan struct{}, g.cfg.LargeBodiesInFlight)
	g.stats.GaugeFunc("http.ingress.downstream_rq_large_body_active", func() int64 { return int64(len(slots)) })
	var credentials *credentialChecker
	if secrets != nil {
		credentials = &credentialChecker{client: secretsv1.NewSecretsServiceClient(secrets), calls: g.calls}
	}
	return &bodyGate{
		finder: finder, credentials: credentials, refuse: g.cfg.RefuseBeforeBody, maxBody: g.cfg.MaxBodyBytes,
		threshold: g.cfg.LargeBodyThreshold, slots: slots,
		forwarded:   headerAllowList(forwarded),
		renderError: errorHandler(g.logger.Named("gateway")),
		logger:      g.logger.Named("gateway"),
		audit:       g.cfg.Audit,
		refused:     g.stats.Counter("http.ingress.downstream_rq_refused_before_body"),
		overflowed:  g.stats.Counter("http.ingress.downstream_rq_large_body_overflow"),
	}, nil
}

func (b *bodyGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			// No body (the server reports a chunked body as -1).
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > b.maxBody {
			// limitBody's answer, kept first: a declared oversized body is refused as before.
			unreadBody(w)
			writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", b.maxBody), nil)
			return
		}
		var route *gatedRoute
		var template string
		if b.refuse != nil || b.credentials != nil {
			var params map[string]string
			if route, template, params = b.finder.find(r); route != nil && route.public {
				route = nil // public routes are the service's to answer, body and all
			}
			if route != nil && b.refuse != nil {
				if err := b.refuse(PreBodyCall{FullMethod: route.fullMethod, Template: template, Params: params, Header: b.header(r)}); err != nil {
					b.refuseCall(w, r, r.Context(), route.fullMethod, err, true)
					return
				}
			}
		}
		if r.ContentLength >= 0 && r.ContentLength <= b.threshold {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength < 0 {
			// No declared length (chunked): a body that ends within the threshold is small.
			head, err := io.ReadAll(io.LimitReader(r.Body, b.threshold+1))
			if err != nil {
				writeBadRequest(w, r, "could not read the request body")
				return
			}
			if int64(len(head)) <= b.threshold {
				r.Body = io.NopCloser(bytes.NewReader(head))
				next.ServeHTTP(w, r)
				return
			}
			r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		}
		// A large body: the service says first whether it would accept the call's credentials, so
		// that a forged one never has its body read nor holds a slot a real one could use.
		if route != nil && route.secrets && b.credentials != nil {
			if ctx, err := b.credentials.check(r, route.fullMethod, template); err != nil {
				// The service audited its refusal, as it audits the call's.
				b.refuseCall(w, r, ctx, route.fullMethod, err, false)
				return
			}
		}
		select {
		case b.slots <- struct{}{}:
			defer func() { <-b.slots }()
		default:
			b.overflowed.Inc()
			unreadBody(w)
			w.Header().Set(wirekeys.RetryAfter, "1")
			writeJSONError(w, http.StatusServiceUnavailable,
				fmt.Sprintf("too many requests with a body over %d bytes in flight; retry later", b.threshold), nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type readCloser struct {
	io.Reader
	io.Closer
}

// header reads request headers as the services receive them: grpc-gateway forwards Authorization
// itself, the rest only through the allow-list of the REST mux.
func (b *bodyGate) header(r *http.Request) func(string) ([]string, bool) {
	return func(name string) ([]string, bool) {
		key := http.CanonicalHeaderKey(name)
		if key == http.CanonicalHeaderKey(wirekeys.Authorization) {
			return r.Header.Values(key), true
		}
		if _, ok := b.forwarded(key); !ok {
			return nil, false
		}
		return r.Header.Values(key), true
	}
}

// refuseCall answers a call refused before its body exactly as the REST mux answers the service's
// refusal, counts it, and logs it sampled: a flood of refusals writes at most one line a second.
func (b *bodyGate) refuseCall(w http.ResponseWriter, r *http.Request, ctx context.Context, method string, err error, audit bool) {
	b.refused.Inc()
	if suppressed, ok := b.sampler.allow(time.Now()); ok {
		st := status.Convert(err)
		b.logger.Info("refused before reading the body", zap.String("method", method), zap.String("path", clip(r.URL.Path)),
			zap.String("code", st.Code().String()), zap.String("reason", clip(st.Message())),
			zap.String("request_id", r.Header.Get(wirekeys.RequestID)), zap.String("remote_addr", r.RemoteAddr),
			zap.Int64("suppressed", suppressed))
	}
	if audit {
		b.auditRefusal(r, method, err)
	}
	unreadBody(w)
	b.renderError(ctx, nil, nil, w, r, err)
}

// auditRefusal puts a call refused before its body on the audit trail, as the service would have
// had it reached the service: the RPC, the route, the identity the gateway forwards (the chat
// caller's), the request id and the client address. The body was never read, so the action is the
// RPC's name (the chat action named in the body is unknown).
func (b *bodyGate) auditRefusal(r *http.Request, method string, err error) {
	if b.audit == nil {
		return
	}
	suppressed, ok := b.auditRefusals.Allow()
	if !ok {
		return
	}
	st := status.Convert(err)
	service, rpc := "", method
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		rpc = method[i+1:]
		service, _, _ = strings.Cut(strings.TrimPrefix(method[:i], "/"), ".")
	}
	rec := audit.Record{Service: service, Outcome: audit.Denied, Method: method, Action: rpc,
		Resource: "route", ResourceID: clip(r.URL.Path), RequestID: r.Header.Get(wirekeys.RequestID),
		Code: st.Code().String(), Reason: clip(st.Message()), Suppressed: suppressed}
	if host, _, splitErr := net.SplitHostPort(r.RemoteAddr); splitErr == nil {
		rec.ClientAddr = host
	}
	// The identity header as the edge left it: set by the gateway for internal callers, or the
	// caller's own where the chat configuration accepts it (the header the refusal was decided on).
	if id := r.Header.Get(wirekeys.DownstreamServiceCluster); id != "" {
		rec.Principal, rec.AuthType, rec.PrincipalType = clip(id), "gateway-identity", "external"
		if r.Header.Get(wirekeys.ProxyInternal) == "true" {
			rec.PrincipalType = "internal"
		}
	}
	_ = b.audit.Write(rec) // a refusal goes on when the trail is down, as the services' do
}

// unreadBody closes the connection after an answer given without reading the request's body. The
// server would otherwise read up to 256 KiB of it after the handler to reuse the connection (the
// access log's counting wrapper hides from it how much is left), holding the answer until the client
// has sent that much: the body must not be read, nor waited for.
func unreadBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

// clip bounds a client-chosen value for the log.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	s = s[:limit]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// refusalSampler lets one log line through per second and counts the others.
type refusalSampler struct {
	mu         sync.Mutex
	second     int64
	suppressed int64
}

func (s *refusalSampler) allow(now time.Time) (suppressedBefore int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := now.Unix(); sec != s.second {
		s.second = sec
		suppressedBefore, s.suppressed = s.suppressed, 0
		return suppressedBefore, true
	}
	s.suppressed++
	return 0, false
}

// methodOrder lists a service's methods as the generated code registers their routes: in the order
// of the proto, which decides between overlapping patterns.
func methodOrder(service protoreflect.FullName, methods protoreflect.MethodDescriptors) []string {
	out := make([]string, methods.Len())
	for i := range out {
		out[i] = "/" + string(service) + "/" + string(methods.Get(i).Name())
	}
	return out
}
