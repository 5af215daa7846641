package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/gateway/webui"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	gantryproto "github.com/gantry-dev/gantry/proto"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	proxyadminv1 "github.com/gantry-dev/gantry/proto/proxyadmin/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/proxyadmin"
)

// forwardedHeaders are passed to the services as gRPC metadata under their lower-case names: the auth
// material, If-Match (the expected revision of a write, gantry's optimistic concurrency) and the
// gateway's own headers. Authorization is always forwarded by grpc-gateway itself.
var forwardedHeaders = []string{
	wirekeys.Cookie, wirekeys.AuthFrom, wirekeys.AuthToken, wirekeys.XSRFToken, wirekeys.IfMatch,
	wirekeys.ProxyInternal, wirekeys.DownstreamServiceCluster, wirekeys.RequestID, wirekeys.ClientCert,
}

// responseHeaders are the response metadata keys services may set as HTTP response headers.
var responseHeaders = map[string]bool{
	wirekeys.SetCookie: true, wirekeys.Location: true, wirekeys.RetryAfter: true, "cache-control": true, "www-authenticate": true,
}

// forwardStatus applies a service-chosen HTTP status; the Location and Set-Cookie headers it goes
// with were already copied by the outgoing header matcher.
func forwardStatus(ctx context.Context, w http.ResponseWriter, _ proto.Message) error {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	if !ok {
		return nil
	}
	if vals := md.HeaderMD.Get(wirekeys.HTTPCode); len(vals) > 0 {
		if code, err := strconv.Atoi(vals[0]); err == nil && code >= 200 && code < 600 {
			w.WriteHeader(code)
		}
	}
	return nil
}

// secureCookies marks every cookie a service sets Secure when the REST listener serves TLS itself
// (-tls-cert-file): a browser that reached gantry over https must never send its session back over
// plain http. It runs before forwardStatus writes the header. The services cannot know how the
// gateway listens (in a split deployment they run elsewhere), so it is decided here;
// SECURE_COOKIES stays the switch for TLS terminated in front of a plain-HTTP gantry.
func (g *Gateway) secureCookies(_ context.Context, w http.ResponseWriter, _ proto.Message) error {
	if g.tls == nil {
		return nil
	}
	cookies := w.Header().Values(wirekeys.SetCookie)
	if len(cookies) == 0 {
		return nil
	}
	marked := make([]string, len(cookies))
	for i, c := range cookies {
		marked[i] = c
		if !cookieIsSecure(c) {
			marked[i] = c + "; Secure"
		}
	}
	w.Header()[http.CanonicalHeaderKey(wirekeys.SetCookie)] = marked
	return nil
}

// cookieIsSecure reports whether a Set-Cookie value carries the Secure attribute.
func cookieIsSecure(setCookie string) bool {
	_, attrs, _ := strings.Cut(setCookie, ";")
	for _, a := range strings.Split(attrs, ";") {
		if strings.EqualFold(strings.TrimSpace(a), "secure") {
			return true
		}
	}
	return false
}

// ServesTLS reports whether the REST listener serves HTTPS (-tls-cert-file): its URLs are https://.
func (c Config) ServesTLS() bool { return c.TLSCertFile != "" }

// Listeners are the sockets the gateway serves on; tests pass 127.0.0.1:0 listeners.
type Listeners struct {
	Main, Admin, AdminGRPC net.Listener
}

// Gateway is the edge proxy and its admin interface.
type Gateway struct {
	cfg         Config
	logger      *zap.Logger
	levels      *logging.Levels
	internal    []netip.Prefix
	started     time.Time
	draining    atomic.Bool
	stats       *stats.Store
	tls         *tls.Config
	cert        *x509.Certificate
	clusterCfgs []upstream.ClusterConfig
	clusters    atomic.Pointer[upstream.Manager] // set by Serve
	quit        context.CancelFunc
	calls       *upstreamCalls
	slack       *slackEdge
}

// Logger names the gateway registers for /logging, below the "gateway" logger the stack gives it.
var loggerNames = []string{"gateway", "gateway.upstream", "gateway.http", "gateway.proxyadmin", "gateway.slack"}

// New returns a gateway for a validated configuration.
func New(cfg Config, logger *zap.Logger) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	logger, levels := logging.WithLevels(logger)
	levels.Register(loggerNames...)
	internal, _ := cfg.internalPrefixes()
	clusterCfgs, _ := cfg.Clusters()
	st := cfg.Stats
	if st == nil {
		st = stats.New()
	}
	g := &Gateway{cfg: cfg, logger: logger, levels: levels, internal: internal, started: time.Now(), stats: st,
		clusterCfgs: clusterCfgs, quit: func() {}}
	var err error
	if g.tls, g.cert, err = g.loadTLS(); err != nil {
		return nil, err
	}
	g.calls = g.newUpstreamCalls()
	g.slack = newSlackEdge(cfg, st, g.calls, logger.Named("slack"))
	g.registerServerStats()
	return g, nil
}

// Serve serves REST, admin HTTP and admin gRPC until ctx ends or /quitquitquit, then shuts all three
// down, letting requests in flight finish for up to grace. It returns nil after /quitquitquit.
func (g *Gateway) Serve(ctx context.Context, lis Listeners, grace time.Duration) error {
	if ap, err := netip.ParseAddrPort(lis.Admin.Addr().String()); err == nil && !ap.Addr().IsLoopback() {
		g.logger.Warn("THE ADMIN INTERFACE IS REACHABLE FROM OTHER HOSTS: it has no authentication and can stop the gateway; bind it to 127.0.0.1",
			zap.String("admin_listen", lis.Admin.Addr().String()))
	}
	ctx, g.quit = context.WithCancel(ctx)
	defer g.quit()

	clusters, err := upstream.Start(ctx, g.cfg.Config, g.clusterCfgs, g.stats, g.logger)
	if err != nil {
		return err
	}
	g.clusters.Store(clusters)
	defer clusters.Shutdown()

	adminOpts := append(g.cfg.Limits.GRPCOptions(), g.cfg.AdminServerOptions...)
	adminOpts = append(adminOpts, grpc.ChainUnaryInterceptor(adminAudit(g.cfg.Audit)))
	adminGRPC := grpcserver.New(g.logger.Named("proxyadmin.grpc"), adminOpts...)
	proxyadminv1.RegisterProxyAdminServiceServer(adminGRPC.Server, proxyadmin.NewServer(proxyadmin.NewService(g, g.started)))

	adminCreds := g.cfg.AdminClientCredentials
	if adminCreds == nil {
		adminCreds = insecure.NewCredentials()
	}
	adminConn, err := grpc.NewClient(lis.AdminGRPC.Addr().String(), grpc.WithTransportCredentials(adminCreds))
	if err != nil {
		return fmt.Errorf("gateway: dial admin: %w", err)
	}
	defer func() { _ = adminConn.Close() }()

	secretsConn := clusters.Conn(upstream.ClusterSecrets)
	mainMux, err := g.mainMux(ctx, secretsConn, clusters.Conn(upstream.ClusterChat))
	if err != nil {
		return err
	}
	adminMux, err := g.adminMux(ctx, adminConn)
	if err != nil {
		return err
	}

	accessLog, err := openAccessLog(g.cfg.AccessLog)
	if err != nil {
		return err
	}
	defer accessLog.close()
	ingress, adminStats := newHTTPStats(g.stats, "ingress"), newHTTPStats(g.stats, "admin")
	ingress.routes = newRouteStats(g.stats, "ingress")
	gate, err := g.newBodyGate(g.forwardedHeaders(), secretsConn)
	if err != nil {
		return err
	}
	// Security headers go first, so every answer has them: /healthcheck, 400, 413 and 503 of the
	// limits, refusals before the body, routing errors and upstream failures alike.
	mainSrv := g.newHTTPServer(ingress.wrap(accessLog.wrap(securityHeaders(g.cfg.HSTSMaxAge, g.healthcheck(ingress, edgeHeaders(g.internal, markInternal(g.internal, forwardClientCert(
		limitQuery(g.cfg.Limits, requireUTF8(g.slack.wrap(gate.wrap(limitBody(g.cfg.MaxBodyBytes, mainMux)))))))))))))
	mainSrv.ConnState = ingress.connState
	mainSrv.TLSConfig = g.tls
	adminSrv := g.newHTTPServer(adminStats.wrap(g.adminGuard(limitQuery(g.cfg.Limits, requireUTF8(limitBody(g.cfg.MaxBodyBytes, g.adminMethods(adminMux)))))))
	adminSrv.ConnState = adminStats.connState

	grp, gctx := errgroup.WithContext(ctx)
	grp.Go(func() error { return adminGRPC.Serve(gctx, lis.AdminGRPC, grace) })
	grp.Go(func() error { return serveHTTP(gctx, mainSrv, lis.Main, grace) })
	grp.Go(func() error { return serveHTTP(gctx, adminSrv, lis.Admin, grace) })
	return grp.Wait()
}

// muxOptions are shared by the REST and admin muxes: proto field names, every field emitted, unknown
// request fields ignored, HttpBody written raw, json_inline fields flattened, errors as JSON.
func (g *Gateway) muxOptions(extra ...runtime.ServeMuxOption) []runtime.ServeMuxOption {
	jsonpb := &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}
	forwarded := g.forwardedHeaders()
	opts := []runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: requestMarshaler{jsonpb}}),
		runtime.WithMarshalerOption(formContentType, &runtime.HTTPBodyMarshaler{Marshaler: formMarshaler{requestMarshaler{jsonpb}}}),
		runtime.WithErrorHandler(errorHandler(g.logger.Named("gateway"))),
		installQueryParser(),
		// Deny by default: only the auth headers, the gateway's own headers and -forward-headers reach the
		// services (grpc-gateway's default matcher would pass every Grpc-Metadata-* header on).
		runtime.WithIncomingHeaderMatcher(headerAllowList(forwarded)),
		// The route a call came by, for access control that decides on the spelling a caller used
		// (chat's, as Omnibot's): the gateway's own metadata, never a client's header.
		runtime.WithMetadata(routeMetadata),
		// Response metadata becomes HTTP headers only where a header means something to an HTTP
		// client; gRPC plumbing (content-type: application/grpc) stays out.
		runtime.WithOutgoingHeaderMatcher(func(key string) (string, bool) {
			k := strings.ToLower(key)
			return k, responseHeaders[k]
		}),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithForwardResponseOption(g.secureCookies),
		runtime.WithForwardResponseOption(forwardStatus),
		runtime.WithForwardResponseRewriter(chainRewriters(heldChangeRewriter(jsonpb.MarshalOptions), inlineRewriter(jsonpb.MarshalOptions))),
	}
	return append(opts, extra...)
}

// forwardedHeaders are the request headers the REST mux passes to the services as metadata. The
// route metadata is the gateway's to set: a client header of that name is never passed on, even when
// -forward-headers names it.
func (g *Gateway) forwardedHeaders() []string {
	return slices.DeleteFunc(append(append([]string{}, forwardedHeaders...), settings.SplitList(g.cfg.ForwardHeaders)...), func(h string) bool {
		return strings.EqualFold(h, wirekeys.ProxyRoute)
	})
}

// routeMetadata names the REST route a call came by (wirekeys.ProxyRoute): the path template of
// the binding grpc-gateway matched, e.g. /api/v2/slack/action/{team_name}/{bot_name}.
func routeMetadata(ctx context.Context, _ *http.Request) metadata.MD {
	if pattern, ok := runtime.HTTPPathPattern(ctx); ok {
		return metadata.Pairs(wirekeys.ProxyRoute, pattern)
	}
	return nil
}

// routePrefixes are the first path segments of each service's REST routes (TestRoutePrefixes checks
// the OpenAPI documents against them).
var routePrefixes = map[string]string{upstream.ClusterSecrets: "/v1/", upstream.ClusterChat: "/api/"}

// notRouted answers every route of a service this gateway has no cluster for (its upstream flag is
// empty and the clusters file does not name it): 404 at once, saying so, rather than a cluster of
// no host, which would answer 503 and alert as down forever.
func notRouted(service, flag string) http.Handler {
	msg := fmt.Sprintf("this gateway does not route to the %s service: it has no %s cluster (set %s or name the cluster in -clusters-file)", service, service, flag)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSONError(w, http.StatusNotFound, msg, nil)
	})
}

// mainMux routes the REST paths to the secrets and chat clusters; each call picks a healthy host. A
// nil connection is a service without a cluster: its routes answer notRouted.
// The web UI's page and assets (package webui) are served here too, at / and under /ui/.
//
// grpc-gateway's mux tries the patterns of a method one by one, allocating at each, so a request
// whose path starts with one service's prefix goes to a mux of that service's routes alone. It
// answers exactly as the mux of every route would: no route of the other service can match such a
// path, under any method (which also keeps 405 answers the same). Every other path (/openapi/...,
// paths no route serves) goes to the mux of every route.
func (g *Gateway) mainMux(ctx context.Context, secrets, chat grpc.ClientConnInterface) (http.Handler, error) {
	newMux := func(withSecrets, withChat bool) (*runtime.ServeMux, error) {
		// labelRoute names the route each request matched, for the latency by route (routeStats).
		mux := runtime.NewServeMux(g.muxOptions(runtime.WithRoutingErrorHandler(routingErrorHandler), runtime.WithMiddlewares(labelRoute))...)
		if withSecrets {
			if err := secretsv1.RegisterSecretsServiceHandlerClient(ctx, mux, secretsv1.NewSecretsServiceClient(secrets)); err != nil {
				return nil, err
			}
		}
		if withChat {
			// The receivers first: the mux tries the patterns registered last first, and an action
			// (every bot's call) should not miss the six receiver paths on its way to its own. No
			// receiver path has the shape of a generated route, so the order changes no answer.
			if err := g.slack.registerSlackReceivers(mux, chatv1.NewChatServiceClient(chat)); err != nil {
				return nil, err
			}
			if err := chatv1.RegisterChatServiceHandlerClient(ctx, mux, chatv1.NewChatServiceClient(chat)); err != nil {
				return nil, err
			}
		}
		return mux, nil
	}
	all, err := newMux(secrets != nil, chat != nil)
	if err != nil {
		return nil, err
	}
	if err := serveOpenAPI(all, "secrets", "chat"); err != nil {
		return nil, err
	}
	var secretsOnly, chatOnly http.Handler = notRouted(upstream.ClusterSecrets, "-secrets-upstream"), notRouted(upstream.ClusterChat, "-chat-upstream")
	if secrets != nil {
		if secretsOnly, err = newMux(true, false); err != nil {
			return nil, err
		}
	}
	if chat != nil {
		if chatOnly, err = newMux(false, true); err != nil {
			return nil, err
		}
	}
	secretsPrefix, chatPrefix := routePrefixes[upstream.ClusterSecrets], routePrefixes[upstream.ClusterChat]
	ui := webui.Handler()
	byPrefix := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case webui.Serves(r.URL.Path):
			ui.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, secretsPrefix):
			secretsOnly.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, chatPrefix):
			chatOnly.ServeHTTP(w, r)
		default:
			all.ServeHTTP(w, r)
		}
	})
	return g.calls.wrap(byPrefix), nil
}

func (g *Gateway) adminMux(ctx context.Context, admin *grpc.ClientConn) (http.Handler, error) {
	mux := runtime.NewServeMux(g.muxOptions(
		runtime.WithRoutingErrorHandler(adminRoutingErrorHandler),
	)...)
	if err := proxyadminv1.RegisterProxyAdminServiceHandler(ctx, mux, admin); err != nil {
		return nil, err
	}
	if err := serveOpenAPI(mux, "proxyadmin"); err != nil {
		return nil, err
	}
	return mux, nil
}

// serveOpenAPI serves the generated OpenAPI document of each service at /openapi/<service>.json.
func serveOpenAPI(mux *runtime.ServeMux, services ...string) error {
	docs := map[string][]byte{}
	for _, svc := range services {
		data, err := fs.ReadFile(gantryproto.OpenAPI, svc+"/v1/"+svc+".swagger.json")
		if err != nil {
			return fmt.Errorf("gateway: openapi document of %s: %w", svc, err)
		}
		docs[svc+".json"] = data
	}
	return mux.HandlePath(http.MethodGet, "/openapi/{file}", func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		data, ok := docs[params["file"]]
		if !ok {
			writeJSONError(w, http.StatusNotFound, "no OpenAPI document "+params["file"], nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	})
}

// newHTTPServer bounds what one client can hold (header size, the time to send headers and body, idle
// connections) with the configured listener limits.
func (g *Gateway) newHTTPServer(h http.Handler) *http.Server {
	return g.cfg.Limits.HTTPServer(h, zap.NewStdLog(g.logger.Named("http")))
}

func serveHTTP(ctx context.Context, srv *http.Server, lis net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(lis, "", "")
			return
		}
		errc <- srv.Serve(lis)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
