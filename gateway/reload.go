package gateway

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// clusterSlot is what the REST routes call for one cluster name: the cluster behind it is replaced
// whole when the clusters file is reloaded, while calls already in flight finish on the old one.
type clusterSlot struct {
	cur atomic.Pointer[cluster]
}

// Invoke implements grpc.ClientConnInterface on the current cluster.
func (s *clusterSlot) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	for {
		c := s.cur.Load()
		if !c.enter() {
			continue // retired between the load and the call: take its successor
		}
		err := c.Invoke(ctx, method, args, reply, opts...)
		c.leave()
		return err
	}
}

// NewStream implements grpc.ClientConnInterface (no REST route streams).
func (s *clusterSlot) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return s.cur.Load().NewStream(ctx, desc, method, opts...)
}

// enter counts a call on c, unless c is retired.
func (c *cluster) enter() bool {
	c.inflight.Add(1)
	if c.retired.Load() {
		c.inflight.Add(-1)
		return false
	}
	return true
}

func (c *cluster) leave() { c.inflight.Add(-1) }

// clusterSet runs the gateway's clusters and swaps them on reload.
type clusterSet struct {
	g      *Gateway
	ctx    context.Context // the gateway's serving context
	wg     sync.WaitGroup  // health-check loops, and retirements under way
	mu     sync.Mutex      // serialises reloads
	slots  map[string]*clusterSlot
	stops  map[*cluster]context.CancelFunc
	stopMu sync.Mutex
}

func (g *Gateway) newClusterSet(ctx context.Context) (*clusterSet, error) {
	set := &clusterSet{g: g, ctx: ctx, slots: map[string]*clusterSlot{}, stops: map[*cluster]context.CancelFunc{}}
	built, err := set.build(g.clusterCfgs)
	if err != nil {
		return nil, err
	}
	for name, c := range built {
		slot := &clusterSlot{}
		slot.cur.Store(c)
		set.slots[name] = slot
		set.start(c)
	}
	return set, nil
}

// build dials every cluster of cfgs; on failure nothing is left open.
func (set *clusterSet) build(cfgs []ClusterConfig) (map[string]*cluster, error) {
	out := map[string]*cluster{}
	for _, cc := range cfgs {
		c, err := newCluster(cc, set.g.cfg.UpstreamCredentials, set.g.cfg.InProcessServices, set.g.stats, set.g.logger.Named("upstream"))
		if err != nil {
			for _, done := range out {
				done.close()
			}
			return nil, err
		}
		out[cc.Name] = c
	}
	return out, nil
}

// start runs c's health checks and outlier reviews until it is retired or the gateway stops.
func (set *clusterSet) start(c *cluster) {
	ctx, cancel := context.WithCancel(set.ctx)
	set.stopMu.Lock()
	set.stops[c] = cancel
	set.stopMu.Unlock()
	set.wg.Add(1)
	go func() {
		defer set.wg.Done()
		c.run(ctx)
	}()
}

// reload re-reads the clusters configuration and, when it is valid, replaces every cluster: new
// calls go to the new hosts at once, calls in flight finish on the old ones, which are then closed.
func (set *clusterSet) reload() error {
	set.mu.Lock()
	defer set.mu.Unlock()
	cfgs, err := set.g.cfg.clusters()
	if err == nil {
		for _, cc := range cfgs {
			if set.slots[cc.Name] == nil {
				err = errors.New("cluster " + cc.Name + " cannot be added by a reload")
			}
		}
	}
	var built map[string]*cluster
	if err == nil {
		built, err = set.build(cfgs)
	}
	if err != nil {
		set.g.stats.Counter("cluster_manager.cds.update_rejected").Inc()
		set.g.logger.Error("clusters reload rejected; the running clusters stay", zap.Error(err))
		return err
	}
	for name, c := range built {
		set.start(c)
		old := set.slots[name].cur.Swap(c)
		set.retire(old)
	}
	set.g.stats.Counter("cluster_manager.cds.update_success").Inc()
	set.g.logger.Info("clusters reloaded", zap.String("clusters_file", set.g.cfg.ClustersFile))
	return nil
}

// retire stops c's health checks and closes its connections once its calls in flight are done (at
// most the upstream timeout later).
func (set *clusterSet) retire(c *cluster) {
	c.retired.Store(true)
	set.stopMu.Lock()
	if stop := set.stops[c]; stop != nil {
		stop()
		delete(set.stops, c)
	}
	set.stopMu.Unlock()
	set.wg.Add(1)
	go func() {
		defer set.wg.Done()
		deadline := time.Now().Add(set.g.cfg.UpstreamTimeout + time.Second)
		for c.inflight.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		c.close()
	}()
}

// current lists the running clusters by name.
func (set *clusterSet) current() []*cluster {
	names := make([]string, 0, len(set.slots))
	for name := range set.slots {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*cluster, 0, len(names))
	for _, name := range names {
		out = append(out, set.slots[name].cur.Load())
	}
	return out
}

// shutdown stops every loop and closes every cluster, after Serve's servers have stopped.
func (set *clusterSet) shutdown() {
	set.mu.Lock()
	defer set.mu.Unlock()
	set.stopMu.Lock()
	for _, stop := range set.stops {
		stop()
	}
	set.stopMu.Unlock()
	set.wg.Wait()
	for _, c := range set.current() {
		c.close()
	}
}

// errNotServing answers Reload before Serve.
var errNotServing = errors.New("gateway: not serving")

// Reload re-reads the clusters file (SIGHUP): on success the new clusters take new requests at once
// and requests in flight finish on the old ones; on error the running clusters stay, the error is
// logged and counted (cluster_manager.cds.update_rejected), and returned.
func (g *Gateway) Reload() error {
	set := g.set.Load()
	if set == nil {
		return errNotServing
	}
	return set.reload()
}
