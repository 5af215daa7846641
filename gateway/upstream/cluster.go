package upstream

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstats "google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/gantry-dev/gantry/pkg/clusterstatus"
	"github.com/gantry-dev/gantry/pkg/rpcerr"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// errNoHealthyUpstream is what a request gets when every host of its cluster is down; the REST
// error handler renders it as 503 {"error": "no healthy upstream"}, Envoy's wording.
var errNoHealthyUpstream = status.Error(codes.Unavailable, "no healthy upstream")

// hostStats are the per-host statistics of /clusters (Envoy keeps them out of /stats too).
type hostStats struct {
	cxTotal, cxConnectFail, rqTotal, rqTimeout, rqSuccess, rqError atomic.Uint64
	cxActive, rqActive                                             atomic.Int64
}

// host is one upstream host of a cluster, with its own gRPC connection: the cluster, not a gRPC
// balancer, picks the host of every request, so stats and health are exact per host.
type host struct {
	cfg   HostConfig
	conn  hostConn
	stats hostStats

	mu              sync.Mutex
	failedActiveHC  bool
	hcPasses        int // consecutive
	hcFailures      int // consecutive
	ejectedUntil    time.Time
	ejections       int // ejection multiplier
	consecutiveFail int
	// probe is the health check in flight that decides whether the host is frozen (frozen.go).
	probe *frozenProbe
	// lastAnswer is when the host's service last answered a call or passed a health check (Unix
	// nanoseconds).
	lastAnswer atomic.Int64
}

// cluster is a named group of hosts with active health checking and outlier detection.
type cluster struct {
	name           string
	hosts          []*host
	hc             HealthCheckConfig
	od             OutlierConfig
	panicThreshold int // percent
	retry          RetryConfig
	breakers       BreakerConfig
	limits         *limits
	// inflight and retired let a reload close the cluster once its calls are done.
	inflight atomic.Int64
	retired  atomic.Bool
	logger   *zap.Logger
	now      func() time.Time

	rqTotal, rqCompleted, rqTimeout, rqRetry, cxTotal, cxConnectFail         *stats.Counter
	cxNoneHealthy, lbHealthyPanic                                            *stats.Counter
	rqPerTryTimeout, rqRetrySuccess, rqRetryOverflow, rqPendingOverflow      *stats.Counter
	rqTime                                                                   *stats.Histogram
	rqActive, cxActive                                                       *stats.Gauge
	hcAttempt, hcSuccess, hcFailure, hcNetworkFailure                        *stats.Counter
	odEjectionsTotal, odEnforcedTotal, odConsecutive, odDetected, odOverflow *stats.Counter
	odDetectedLocalOrigin, odEnforcedLocalOrigin                             *stats.Counter
	store                                                                    *stats.Store
	prefix                                                                   string
	// answers caches the counters of countAnswer by HTTP code.
	answers sync.Map
}

// newCluster dials the hosts of cfg (lazily: grpc connects on first use). A host whose address is a key
// of inProcess is a service of this process and is called directly through it; every other host over
// TCP.
func newCluster(cfg ClusterConfig, creds credentials.TransportCredentials, inProcess map[string]InProcessService, store *stats.Store, logger *zap.Logger) (*cluster, error) {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	p := "cluster." + cfg.Name + "."
	c := &cluster{
		name: cfg.Name, hc: *cfg.HealthCheck, od: *cfg.Outlier, panicThreshold: *cfg.HealthyPanicThreshold,
		retry: *cfg.Retry, breakers: *cfg.Breakers, logger: logger, now: time.Now, store: store, prefix: p,
		rqTotal: store.Counter(p + "upstream_rq_total"), rqCompleted: store.Counter(p + "upstream_rq_completed"),
		rqTimeout: store.Counter(p + "upstream_rq_timeout"), rqRetry: store.Counter(p + "upstream_rq_retry"), cxTotal: store.Counter(p + "upstream_cx_total"),
		cxConnectFail: store.Counter(p + "upstream_cx_connect_fail"), cxNoneHealthy: store.Counter(p + "upstream_cx_none_healthy"),
		lbHealthyPanic:    store.Counter(p + "lb_healthy_panic"),
		rqPerTryTimeout:   store.Counter(p + "upstream_rq_per_try_timeout"),
		rqRetrySuccess:    store.Counter(p + "upstream_rq_retry_success"),
		rqRetryOverflow:   store.Counter(p + "upstream_rq_retry_overflow"),
		rqPendingOverflow: store.Counter(p + "upstream_rq_pending_overflow"),
		rqTime:            store.Histogram(p + "upstream_rq_time"),
		rqActive:          store.Gauge(p + "upstream_rq_active"), cxActive: store.Gauge(p + "upstream_cx_active"),
		hcAttempt: store.Counter(p + "health_check.attempt"), hcSuccess: store.Counter(p + "health_check.success"),
		hcFailure: store.Counter(p + "health_check.failure"), hcNetworkFailure: store.Counter(p + "health_check.network_failure"),
		odEjectionsTotal:      store.Counter(p + "outlier_detection.ejections_total"),
		odEnforcedTotal:       store.Counter(p + "outlier_detection.ejections_enforced_total"),
		odConsecutive:         store.Counter(p + "outlier_detection.ejections_consecutive_5xx"),
		odDetected:            store.Counter(p + "outlier_detection.ejections_detected_consecutive_5xx"),
		odOverflow:            store.Counter(p + "outlier_detection.ejections_overflow"),
		odDetectedLocalOrigin: store.Counter(p + "outlier_detection.ejections_detected_consecutive_local_origin_failure"),
		odEnforcedLocalOrigin: store.Counter(p + "outlier_detection.ejections_enforced_consecutive_local_origin_failure"),
	}
	c.limits = newLimits(c.breakers, c.retry, c.rqActive)
	for _, hcfg := range cfg.Hosts {
		h := &host{cfg: hcfg}
		if open := inProcess[hcfg.Address]; open != nil {
			h.conn = c.inProcessConn(h, open(answerRecorder{}))
			c.hosts = append(c.hosts, h)
			continue
		}
		conn, err := grpc.NewClient(hcfg.Address,
			grpc.WithTransportCredentials(creds),
			grpc.WithContextDialer(c.dialer(h)),
			grpc.WithStatsHandler(answerRecorder{}),
			grpc.WithConnectParams(c.connectParams()))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("gateway: cluster %s: dial %s: %w", cfg.Name, hcfg.Address, err)
		}
		h.conn = conn
		c.hosts = append(c.hosts, h)
	}
	store.GaugeFunc(p+"membership_total", func() int64 { return int64(len(c.hosts)) })
	store.GaugeFunc(p+"membership_healthy", func() int64 { return int64(c.countHosts((*host).healthyAt)) })
	store.GaugeFunc(p+"health_check.healthy", func() int64 {
		return int64(c.countHosts(func(h *host, _ time.Time) bool { return !h.activeFailed() }))
	})
	store.GaugeFunc(p+"outlier_detection.ejections_active", func() int64 { return int64(c.countHosts((*host).ejectedAt)) })
	c.limits.register(store, p)
	return c, nil
}

// connectParams retry a lost host at least once per health-check interval (gRPC's default backoff
// grows to two minutes), so a host that comes back passes its next check.
func (c *cluster) connectParams() grpc.ConnectParams {
	cfg := backoff.DefaultConfig
	cfg.BaseDelay = min(cfg.BaseDelay, c.hc.Interval)
	cfg.MaxDelay = max(c.hc.Interval, cfg.BaseDelay)
	return grpc.ConnectParams{Backoff: cfg, MinConnectTimeout: max(c.hc.Timeout, time.Second)}
}

func (c *cluster) close() {
	for _, h := range c.hosts {
		_ = h.conn.Close()
	}
}

// hostConn is a host's connection: a grpc.ClientConn, or a direct one to a service of this process.
type hostConn interface {
	grpc.ClientConnInterface
	GetState() connectivity.State
	Close() error
}

// InProcessConn is a direct connection to a service of the gateway's own process
// (inprocgrpc.Conn): it is always Ready, and its calls reach the service's interceptor chain and
// handler without a transport.
type InProcessConn = hostConn

// InProcessService opens a direct connection to a service of the gateway's own process (see
// Config.InProcessServices). The stats handler hears each call's answer (grpcstats.InTrailer) as a
// gRPC connection's stats handler does.
type InProcessService func(grpcstats.Handler) InProcessConn

// inProcessConn counts a direct connection as one connection of the host, open until the cluster
// closes it: /clusters and the stats show it as they show the connection of a host over TCP.
func (c *cluster) inProcessConn(h *host, conn InProcessConn) hostConn {
	h.stats.cxTotal.Add(1)
	h.stats.cxActive.Add(1)
	c.cxTotal.Inc()
	c.cxActive.Add(1)
	return &countedHostConn{hostConn: conn, done: func() { h.stats.cxActive.Add(-1); c.cxActive.Add(-1) }}
}

type countedHostConn struct {
	hostConn
	once sync.Once
	done func()
}

func (c *countedHostConn) Close() error {
	c.once.Do(c.done)
	return c.hostConn.Close()
}

// dialer counts connections per host and cluster: every TCP connection the host's gRPC channel
// opens, every failed attempt, and how many are open.
func (c *cluster) dialer(h *host) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			h.stats.cxConnectFail.Add(1)
			c.cxConnectFail.Inc()
			return nil, err
		}
		h.stats.cxTotal.Add(1)
		h.stats.cxActive.Add(1)
		c.cxTotal.Inc()
		c.cxActive.Add(1)
		return &countedConn{Conn: conn, done: func() { h.stats.cxActive.Add(-1); c.cxActive.Add(-1) }}, nil
	}
}

type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

func (c *cluster) countHosts(pred func(*host, time.Time) bool) int {
	now := c.now()
	n := 0
	for _, h := range c.hosts {
		if pred(h, now) {
			n++
		}
	}
	return n
}

func (h *host) activeFailed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failedActiveHC
}

func (h *host) ejectedAt(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Before(h.ejectedUntil)
}

func (h *host) healthyAt(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.failedActiveHC && !now.Before(h.ejectedUntil)
}

// pick chooses a healthy host at random by weight, leaving out the hosts in skip; nil when none is
// left. When fewer hosts than the panic threshold are healthy, every host is a candidate (Envoy's
// panic mode): a cluster whose hosts were all ejected or failed their checks still tries them rather
// than failing every request.
func (c *cluster) pick(skip ...*host) *host {
	candidates, panicMode := c.candidates()
	if panicMode {
		c.lbHealthyPanic.Inc()
	}
	return byWeight(candidates, skip)
}

// byWeight chooses one of hosts outside skip at random by weight; nil when none is left.
func byWeight(hosts, skip []*host) *host {
	total := 0
	left := make([]*host, 0, len(hosts))
	for _, h := range hosts {
		if !slices.Contains(skip, h) {
			left = append(left, h)
			total += h.cfg.Weight
		}
	}
	if total == 0 {
		return nil
	}
	n := rand.IntN(total)
	for _, h := range left {
		if n < h.cfg.Weight {
			return h
		}
		n -= h.cfg.Weight
	}
	return left[len(left)-1]
}

// candidates are the hosts a request may go to: the healthy ones, or every host in panic mode.
func (c *cluster) candidates() (hosts []*host, panicMode bool) {
	now := c.now()
	healthy := make([]*host, 0, len(c.hosts))
	for _, h := range c.hosts {
		if h.healthyAt(now) {
			healthy = append(healthy, h)
		}
	}
	if len(c.hosts) > 0 && len(healthy)*100 < c.panicThreshold*len(c.hosts) {
		return c.hosts, true
	}
	return healthy, false
}

// panicking reports whether fewer hosts than the panic threshold are healthy (see candidates).
func (c *cluster) panicking() bool {
	return len(c.hosts) > 0 && c.countHosts((*host).healthyAt)*100 < c.panicThreshold*len(c.hosts)
}

// hasOtherHost reports whether the cluster has a host outside tried.
func (c *cluster) hasOtherHost(tried ...*host) bool { return c.anyOtherHost(tried...) != nil }

// anyOtherHost returns a host outside tried, healthy or not, by weight; nil when there is none.
func (c *cluster) anyOtherHost(tried ...*host) *host { return byWeight(c.hosts, tried) }

// Invoke implements grpc.ClientConnInterface: the generated clients of the REST routes call the
// cluster as if it were one connection, and every call goes to one healthy host.
//
// A call acquires what the breakers allow, makes one attempt, and decides from its outcome whether
// to end or retry (retryState): a call that never reached its host (connect failure) is retried
// whatever the method, like Envoy's retry_on: connect-failure; a call that reached its host is
// retried only when the method is idempotent (a read), after a reset, a per-try timeout or an
// Unavailable answer, always on another host. A write that reached its host is never repeated: it
// may have taken effect.
func (c *cluster) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	info := requestInfoFrom(ctx)
	if c.limits.requestsFull() {
		c.rqPendingOverflow.Inc()
		info.flag(FlagUpstreamOverflow)
		return ErrOverloaded
	}
	h := c.pick()
	if h == nil {
		c.cxNoneHealthy.Inc()
		info.flag(FlagNoHealthyUpstream)
		return errNoHealthyUpstream
	}
	r := retryState{c: c, info: info, idempotent: isIdempotent(method)}
	for {
		out := c.attempt(ctx, &r, h, method, args, reply, opts)
		if out.refused {
			c.rqPendingOverflow.Inc()
			info.flag(FlagUpstreamOverflow)
		} else if r.eligible(ctx, out) {
			if h = r.next(h); h != nil {
				continue
			}
			info.flag(FlagRetryLimit)
		}
		c.countAnswer(out.err)
		return out.err
	}
}

// outcome is what one attempt of a call came to.
type outcome struct {
	// err is what the client is to see of the attempt (finish's error).
	err error
	// answered tells whether the service sent its status, reached whether the call got to its host
	// (it has a peer address), refused whether max_pending_requests refused it before it was sent.
	answered, reached, refused bool
}

// attempt sends one try of the call to h and records it: the request counts of the cluster and the
// host (held until the try ends, on every path), the per-try timeout, the request's upstream host,
// time and response flags, and the outcome for outlier detection (finish).
func (c *cluster) attempt(ctx context.Context, r *retryState, h *host, method string, args, reply any, opts []grpc.CallOption) (out outcome) {
	defer r.tryDone(&out) // after end: a retry's slot is held while its request is active
	c.begin(h)
	defer c.end(h)
	bounded, guarded := r.perTryBounded(h), r.writeGuarded(h)
	tryCtx, cancel := ctx, context.CancelFunc(func() {})
	switch {
	case bounded:
		tryCtx, cancel = context.WithTimeout(ctx, c.retry.PerTryTimeout)
	case guarded:
		tryCtx, cancel = c.guardWrite(ctx, h)
	}
	defer cancel()
	var reached peer.Peer
	ans := &answer{}
	started := time.Now()
	sent, err := c.send(withAnswer(tryCtx, ans), h, method, args, reply, append(opts, grpc.Peer(&reached)))
	if !sent {
		return outcome{err: err, refused: true}
	}
	took := time.Since(started)
	r.info.attempt(h.cfg.Address, took)
	c.rqTime.Record(took)
	// The host learns the per-try deadline too (grpc-timeout), and its timer may fire before ours: a
	// DeadlineExceeded answer to a bounded attempt is that same per-try timeout, so it is retried and
	// counted as one, not passed on as a 504.
	perTryTimeout := bounded && ctx.Err() == nil &&
		(tryCtx.Err() == context.DeadlineExceeded || status.Code(err) == codes.DeadlineExceeded)
	if perTryTimeout {
		// A read cut at its per-try timeout asks whether its host is frozen (ejecting it if so), in the
		// background: the read goes on to another host meanwhile.
		go c.alive(h)
	}
	// A write cut because its host was found frozen counts as a per-try timeout too; it is not retried
	// (eligible: a write that reached its host never is). An answer that arrived as the guard cut is
	// the service's and passes through.
	perTryTimeout = perTryTimeout || (guarded && err != nil && !ans.answered.Load() && ctx.Err() == nil &&
		context.Cause(tryCtx) == errHostFrozen)
	answered := ans.answered.Load() && !perTryTimeout
	if flag := transportFlag(err, answered, perTryTimeout); flag != "" {
		r.info.flag(flag)
	}
	if perTryTimeout {
		c.rqPerTryTimeout.Inc()
		err = status.Error(codes.DeadlineExceeded, "per-try timeout")
	}
	return outcome{err: c.finish(ctx, h, method, err, answered), answered: answered, reached: reached.Addr != nil}
}

// transportFlag is the access log's response flag of an attempt that ended without the service's
// answer: UT for a deadline (the upstream's or the per-try one), UF for any other transport failure;
// "" when the service answered, or the client went away (Canceled says nothing about the host).
func transportFlag(err error, answered, perTryTimeout bool) string {
	switch {
	case answered || err == nil:
		return ""
	case status.Code(err) == codes.DeadlineExceeded || perTryTimeout:
		return FlagUpstreamTimeout
	case status.Code(err) != codes.Canceled:
		return FlagUpstreamFailure
	}
	return ""
}

// send makes the call on h's connection; sent is false when the breakers refused it. A call on a
// connection that is not ready waits for it: that is Envoy's pending request, bounded by
// max_pending_requests.
func (c *cluster) send(ctx context.Context, h *host, method string, args, reply any, opts []grpc.CallOption) (sent bool, err error) {
	if h.conn.GetState() != connectivity.Ready {
		release, ok := c.limits.acquirePending()
		if !ok {
			return false, ErrOverloaded
		}
		defer release()
	}
	return true, h.conn.Invoke(ctx, method, args, reply, opts...)
}

// idempotentMethods caches, per full method name, whether the proto marks it
// idempotency_level = NO_SIDE_EFFECTS (or IDEMPOTENT): only those are retried after reaching a host.
var idempotentMethods sync.Map

func isIdempotent(fullMethod string) bool {
	if v, ok := idempotentMethods.Load(fullMethod); ok {
		return v.(bool)
	}
	idem := false
	name := strings.ReplaceAll(strings.TrimPrefix(fullMethod, "/"), "/", ".")
	if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
		if md, ok := d.(protoreflect.MethodDescriptor); ok {
			if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok {
				lvl := opts.GetIdempotencyLevel()
				idem = lvl == descriptorpb.MethodOptions_NO_SIDE_EFFECTS || lvl == descriptorpb.MethodOptions_IDEMPOTENT
			}
		}
	}
	idempotentMethods.Store(fullMethod, idem)
	return idem
}

// NewStream implements grpc.ClientConnInterface. A stream counts as one request, judged by how it
// opened.
func (c *cluster) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	h := c.pick()
	if h == nil {
		c.cxNoneHealthy.Inc()
		return nil, errNoHealthyUpstream
	}
	c.begin(h)
	defer c.end(h)
	ans := &answer{}
	s, err := h.conn.NewStream(withAnswer(ctx, ans), desc, method, opts...)
	err = c.finish(ctx, h, method, err, ans.answered.Load())
	c.countAnswer(err)
	return s, err
}

// begin counts a request to h, active until end: every begin is paired with a deferred end, so no
// path (an answer, a failure, a refusal by the breakers) leaves upstream_rq_active behind.
func (c *cluster) begin(h *host) {
	c.rqTotal.Inc()
	c.rqActive.Add(1)
	h.stats.rqTotal.Add(1)
	h.stats.rqActive.Add(1)
}

// end ends the request begin counted.
func (c *cluster) end(h *host) {
	c.rqActive.Add(-1)
	h.stats.rqActive.Add(-1)
}

// countAnswer counts the answer the client gets, once per request whatever the retries:
// upstream_rq_<code>, upstream_rq_<class>xx and upstream_rq_timeout read like Envoy's.
func (c *cluster) countAnswer(err error) {
	httpCode := http.StatusOK
	code := status.Code(err)
	if err != nil {
		httpCode = HTTPStatusFromCode(code)
	}
	byCode, byClass := c.answerCounters(httpCode)
	byCode.Inc()
	byClass.Inc()
	if code == codes.DeadlineExceeded {
		c.rqTimeout.Inc()
	}
}

// answerCounters returns upstream_rq_<code> and upstream_rq_<class>xx of an HTTP code, created on
// first use (so only codes that happened are listed) and then kept per cluster: building the names and
// looking them up in the shared registry cost two allocations and two locks per request.
func (c *cluster) answerCounters(httpCode int) (byCode, byClass *stats.Counter) {
	if v, ok := c.answers.Load(httpCode); ok {
		pair := v.(*[2]*stats.Counter)
		return pair[0], pair[1]
	}
	pair := &[2]*stats.Counter{
		c.store.Counter(c.prefix + "upstream_rq_" + strconv.Itoa(httpCode)),
		c.store.Counter(c.prefix + "upstream_rq_" + strconv.Itoa(httpCode/100) + "xx"),
	}
	c.answers.Store(httpCode, pair)
	return pair[0], pair[1]
}

// ErrOverloaded refuses a request beyond one of the cluster's circuit breakers (max_requests,
// max_pending_requests); the gateway's error handler adds x-envoy-overloaded: true.
var ErrOverloaded = status.Error(codes.Unavailable, "upstream overloaded")

// Errors a client gets when the gateway, not the service, ended a call: the detail (which names
// upstream addresses) goes to the log only.
var (
	errUpstreamUnavailable = status.Error(codes.Unavailable, "upstream service unavailable")
	errUpstreamTimeout     = status.Error(codes.DeadlineExceeded, "upstream request timeout")
)

// finish records the outcome of one request and returns the error the client is to see. answered
// tells whether the service sent its status (its trailers arrived): then the status is the service's
// answer about the request and passes through. Otherwise the transport failed (the host could not be
// reached, reset the connection, or did not answer before the gateway's own deadline), and the client
// gets a clean 503 or 504.
//
// The HTTP code is the one the REST client gets, so upstream_rq_<code> and upstream_rq_<class>xx read
// like Envoy's; rq_error counts 5xx answers.
func (c *cluster) finish(ctx context.Context, h *host, method string, err error, answered bool) error {
	c.rqCompleted.Inc()
	code := status.Code(err)
	hostFailure := false
	if err != nil && !answered && code != codes.Canceled {
		// The client going away (Canceled) says nothing about the host; everything else that ends a
		// call without an answer does.
		hostFailure = true
		c.logger.Warn("upstream call failed", zap.String("cluster", c.name), zap.String("host", h.cfg.Address),
			zap.String("method", method), zap.String("request_id", requestIDFrom(ctx)), zap.Error(err))
		if code == codes.DeadlineExceeded {
			err = errUpstreamTimeout
		} else {
			err, code = errUpstreamUnavailable, codes.Unavailable
		}
	}
	if answered {
		h.answered(c.now())
	}
	if answered && code == codes.Unavailable && !rpcerr.IsDependencyFailure(err) {
		// A service that answers Unavailable reports its own state (draining, overloaded). A
		// dependency failure (its store, its KMS) is not the host's: its health check takes it out of
		// rotation when only it lost the dependency, and ejecting hosts for a shared one would stop
		// the reads that still work.
		hostFailure = true
	}
	httpCode := http.StatusOK
	if err != nil {
		httpCode = HTTPStatusFromCode(code)
	}
	if code == codes.DeadlineExceeded {
		h.stats.rqTimeout.Add(1)
	}
	if httpCode >= 500 {
		h.stats.rqError.Add(1)
	} else {
		h.stats.rqSuccess.Add(1)
	}
	c.outlierResult(h, hostFailure)
	return err
}

// outlierResult feeds one request result to outlier detection and ejects the host after
// ConsecutiveFailures failures in a row, unless that would eject more than MaxEjectionPercent of
// the cluster.
func (c *cluster) outlierResult(h *host, failed bool) {
	if c.od.ConsecutiveFailures == 0 {
		return
	}
	now := c.now()
	h.mu.Lock()
	if !failed {
		h.consecutiveFail = 0
		h.mu.Unlock()
		return
	}
	h.consecutiveFail++
	trip := h.consecutiveFail >= c.od.ConsecutiveFailures && !now.Before(h.ejectedUntil)
	h.mu.Unlock()
	if !trip {
		return
	}
	c.odDetected.Inc()
	if c.eject(h) {
		c.odConsecutive.Inc()
		c.logger.Warn("host ejected by outlier detection", zap.String("cluster", c.name), zap.String("host", h.cfg.Address))
	}
}

// eject takes h out of rotation for the ejection time (growing with each ejection, up to
// MaxEjectionTime), unless that would eject more than MaxEjectionPercent of the hosts or h is
// ejected already; it reports whether it did.
func (c *cluster) eject(h *host) bool {
	now := c.now()
	if h.ejectedAt(now) {
		return false
	}
	ejected := c.countHosts((*host).ejectedAt)
	limit := c.od.MaxEjectionPercent * len(c.hosts) / 100
	if limit < 1 && c.od.MaxEjectionPercent > 0 {
		limit = 1
	}
	if ejected >= limit {
		c.odOverflow.Inc()
		return false
	}
	h.mu.Lock()
	h.consecutiveFail = 0
	h.ejections++
	d := time.Duration(h.ejections) * c.od.BaseEjectionTime
	if d > c.od.MaxEjectionTime {
		d = c.od.MaxEjectionTime
	}
	h.ejectedUntil = now.Add(d)
	h.mu.Unlock()
	c.odEjectionsTotal.Inc()
	c.odEnforcedTotal.Inc()
	return true
}

// run health-checks every host and reviews ejections until ctx ends.
func (c *cluster) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, h := range c.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.healthCheckLoop(ctx, h)
		}()
	}
	if c.od.ConsecutiveFailures > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.outlierLoop(ctx)
		}()
	}
	wg.Wait()
}

func (c *cluster) healthCheckLoop(ctx context.Context, h *host) {
	// The first check runs at once, so a host down at start is found within one timeout.
	t := time.NewTimer(0)
	defer t.Stop()
	client := healthpb.NewHealthClient(h.conn)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.checkOnce(ctx, client, h)
		t.Reset(c.hc.Interval)
	}
}

// checkOnce runs one grpc.health.v1 check: it passes only with status OK and SERVING.
func (c *cluster) checkOnce(ctx context.Context, client healthpb.HealthClient, h *host) {
	c.hcAttempt.Inc()
	cctx, cancel := context.WithTimeout(ctx, c.hc.Timeout)
	resp, err := client.Check(cctx, &healthpb.HealthCheckRequest{Service: c.hc.ServiceName})
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the host's fault
	}
	passed := err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	if passed {
		c.hcSuccess.Inc()
	} else {
		c.hcFailure.Inc()
		if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded {
			c.hcNetworkFailure.Inc()
		}
	}
	if passed {
		h.answered(c.now())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if passed {
		h.hcFailures = 0
		h.hcPasses++
		if h.failedActiveHC && h.hcPasses >= c.hc.HealthyThreshold {
			h.failedActiveHC = false
			c.logger.Info("host passes health checks again", zap.String("cluster", c.name), zap.String("host", h.cfg.Address))
		}
		// As Envoy does by default, a passed active check also ends an outlier ejection.
		if c.now().Before(h.ejectedUntil) {
			h.ejectedUntil = time.Time{}
		}
		return
	}
	h.hcPasses = 0
	h.hcFailures++
	if !h.failedActiveHC && h.hcFailures >= c.hc.UnhealthyThreshold {
		h.failedActiveHC = true
		c.logger.Warn("host fails health checks", zap.String("cluster", c.name), zap.String("host", h.cfg.Address), zap.Error(err),
			zap.String("status", resp.GetStatus().String()))
	}
}

// outlierLoop lets the ejection multiplier of hosts that stay in service decay, as Envoy does at
// each outlier detection interval.
func (c *cluster) outlierLoop(ctx context.Context) {
	t := time.NewTicker(c.od.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := c.now()
		for _, h := range c.hosts {
			h.mu.Lock()
			if !now.Before(h.ejectedUntil) && h.ejections > 0 && now.Sub(h.ejectedUntil) >= c.od.Interval {
				h.ejections--
			}
			h.mu.Unlock()
		}
	}
}

// report describes the cluster for /clusters.
func (c *cluster) report() clusterstatus.Cluster {
	now := c.now()
	out := clusterstatus.Cluster{Name: c.name, OutlierDetection: c.od.ConsecutiveFailures > 0,
		MaxRequests: c.breakers.MaxRequests, MaxPendingRequests: c.breakers.MaxPendingRequests, MaxRetries: c.breakers.MaxRetries}
	for _, h := range c.hosts {
		h.mu.Lock()
		failedHC, ejected := h.failedActiveHC, now.Before(h.ejectedUntil)
		h.mu.Unlock()
		s := &h.stats
		out.Hosts = append(out.Hosts, clusterstatus.Host{
			Address: h.cfg.Address,
			Stats: []clusterstatus.HostStat{
				{Name: "cx_active", Value: s.cxActive.Load(), Gauge: true},
				{Name: "cx_connect_fail", Value: int64(s.cxConnectFail.Load())},
				{Name: "cx_total", Value: int64(s.cxTotal.Load())},
				{Name: "rq_active", Value: s.rqActive.Load(), Gauge: true},
				{Name: "rq_error", Value: int64(s.rqError.Load())},
				{Name: "rq_success", Value: int64(s.rqSuccess.Load())},
				{Name: "rq_timeout", Value: int64(s.rqTimeout.Load())},
				{Name: "rq_total", Value: int64(s.rqTotal.Load())},
			},
			FailedActiveHC: failedHC, FailedOutlierCheck: ejected,
			Weight: h.cfg.Weight, Zone: h.cfg.Zone, Canary: h.cfg.Canary,
		})
	}
	return out
}

// answer records whether a call's service answered: its trailers (with the status) arrived. A call
// that ends without them failed in transport, whatever code grpc-go gives it.
type answer struct{ answered atomic.Bool }

type answerKey struct{}

func withAnswer(ctx context.Context, a *answer) context.Context {
	return context.WithValue(ctx, answerKey{}, a)
}

// answerRecorder is the stats handler of every host connection: grpc-go reports the arrival of a
// call's trailers (InTrailer, trailers-only answers included) on the call's context.
type answerRecorder struct{}

func (answerRecorder) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context {
	return ctx
}

func (answerRecorder) HandleRPC(ctx context.Context, s grpcstats.RPCStats) {
	if _, ok := s.(*grpcstats.InTrailer); ok {
		if a, ok := ctx.Value(answerKey{}).(*answer); ok {
			a.answered.Store(true)
		}
	}
}

func (answerRecorder) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context {
	return ctx
}

func (answerRecorder) HandleConn(context.Context, grpcstats.ConnStats) {}

// requestIDFrom returns the request id the gateway put in the outgoing metadata, for logs.
func requestIDFrom(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(wirekeys.RequestID); len(v) > 0 {
		return v[0]
	}
	return ""
}
