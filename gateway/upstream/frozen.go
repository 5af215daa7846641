package upstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A write cannot be cut at the per-try timeout the way a read is: it may have been applied, so it
// cannot be tried again, and cutting a write that a healthy but busy host is still working on would
// turn a slow answer into an indeterminate 504 for nothing. But a write on a frozen host (SIGSTOP, a
// hung machine: the connection stays open and nothing answers) would wait the whole upstream
// timeout, and under a few concurrent clients every client soon waits in one while the other hosts
// idle. So when a write has run the per-try timeout, the gateway asks whether its host is frozen:
// a host that answered anything (another call, a health check) within the last per-try timeout is
// alive and the write waits on; otherwise one health check of that host, shared by every call that
// asks at the same moment, decides. A host that does not answer it is frozen: the write is cut (504
// "upstream request timeout", flag UT, upstream_rq_per_try_timeout), never repeated, and the host is
// ejected at once (Envoy's local-origin failure), so the traffic that follows goes to the others
// without waiting for five failures or two failed periodic checks. A read cut at its per-try timeout
// asks the same question, so a frozen host is ejected after the first per-try timeout of either.

// errHostFrozen is the cause of a try cut because its host was found frozen.
var errHostFrozen = errors.New("upstream host frozen: no answer to a health check after the per-try timeout")

// frozenProbeTimeout bounds the health check that decides whether a host is frozen: at most half the
// per-try timeout, and at most the health check timeout.
func (c *cluster) frozenProbeTimeout() time.Duration {
	return min(c.hc.Timeout, c.retry.PerTryTimeout/2)
}

// answered notes that h's service answered a call or passed a health check.
func (h *host) answered(now time.Time) { h.lastAnswer.Store(now.UnixNano()) }

// answeredWithin reports whether h answered anything in the window d before now.
func (h *host) answeredWithin(now time.Time, d time.Duration) bool {
	return now.UnixNano()-h.lastAnswer.Load() < int64(d)
}

// answeredSince reports whether h answered anything at or after t.
func (h *host) answeredSince(t time.Time) bool { return h.lastAnswer.Load() >= t.UnixNano() }

// frozenProbe is one health check asked to decide whether a host is frozen; the calls that ask while
// it runs share its result.
type frozenProbe struct {
	done  chan struct{}
	alive bool
}

// alive reports whether h answers: it answered something within the per-try timeout, or it answers
// a health check within frozenProbeTimeout now. A host found frozen is ejected.
func (c *cluster) alive(h *host) bool {
	if h.answeredWithin(c.now(), c.retry.PerTryTimeout) {
		return true
	}
	h.mu.Lock()
	p := h.probe
	if p == nil {
		p = &frozenProbe{done: make(chan struct{})}
		h.probe = p
		h.mu.Unlock()
		go c.runFrozenProbe(h, p)
	} else {
		h.mu.Unlock()
	}
	<-p.done
	return p.alive
}

func (c *cluster) runFrozenProbe(h *host, p *frozenProbe) {
	started := c.now()
	ans := &answer{}
	ctx, cancel := context.WithTimeout(withAnswer(context.Background(), ans), c.frozenProbeTimeout())
	_, _ = healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: c.hc.ServiceName})
	cancel()
	// Any answer of the host's gRPC server shows it is not frozen, whatever it says: NOT_SERVING (its
	// periodic checks take it out of rotation), or an error (a service_name it does not know, no
	// health service). So does another call it answered while the check was on its way (a loaded
	// host may be slow to answer the check and still be working).
	p.alive = ans.answered.Load() || h.answeredSince(started)
	if p.alive {
		h.answered(c.now())
	} else {
		c.ejectFrozen(h)
	}
	h.mu.Lock()
	h.probe = nil
	h.mu.Unlock()
	close(p.done)
}

// ejectFrozen ejects a host found frozen at once, within MaxEjectionPercent, when outlier detection
// is on.
func (c *cluster) ejectFrozen(h *host) {
	if c.od.ConsecutiveFailures == 0 {
		return
	}
	c.odDetectedLocalOrigin.Inc()
	if c.eject(h) {
		c.odEnforcedLocalOrigin.Inc()
		c.logger.Warn("host ejected: it did not answer a health check after a call's per-try timeout (frozen)",
			zap.String("cluster", c.name), zap.String("host", h.cfg.Address))
	}
}

// frozenGuard watches one write try on h: each time the per-try timeout passes it asks whether h is
// alive (see alive), and cuts the try, with errHostFrozen as the cause, when it is not.
type frozenGuard struct {
	c       *cluster
	h       *host
	cut     context.CancelCauseFunc
	timer   *time.Timer
	stopped atomic.Bool
	mu      sync.Mutex
}

// guardWrite returns the context of a write try on h and the function that ends the guard (call it
// when the try is over; it also releases the context).
func (c *cluster) guardWrite(ctx context.Context, h *host) (context.Context, func()) {
	tryCtx, cut := context.WithCancelCause(ctx)
	g := &frozenGuard{c: c, h: h, cut: cut}
	g.mu.Lock()
	g.timer = time.AfterFunc(c.retry.PerTryTimeout, g.check)
	g.mu.Unlock()
	return tryCtx, func() {
		g.stopped.Store(true)
		g.mu.Lock()
		g.timer.Stop()
		g.mu.Unlock()
		cut(nil)
	}
}

func (g *frozenGuard) check() {
	if g.stopped.Load() {
		return
	}
	if !g.c.alive(g.h) {
		g.cut(errHostFrozen)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped.Load() {
		g.timer.Reset(g.c.retry.PerTryTimeout)
	}
}
