package upstream

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gantry-dev/gantry/pkg/clusterstatus"
	"github.com/gantry-dev/gantry/pkg/stats"
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

// Manager runs the gateway's clusters and swaps them on reload (Envoy's cluster manager).
type Manager struct {
	cfg    Config
	stats  *stats.Store
	logger *zap.Logger     // the gateway's: reloads are logged there, the clusters log as "upstream"
	ctx    context.Context // the gateway's serving context
	wg     sync.WaitGroup  // health-check loops, and retirements under way
	mu     sync.Mutex      // serialises reloads
	slots  map[string]*clusterSlot
	stops  map[*cluster]context.CancelFunc
	stopMu sync.Mutex
}

// Start dials the clusters of cfgs (cfg.Clusters(), read when the gateway was made) and runs their
// health checks and outlier reviews until ctx ends or Shutdown. cfg is re-read on Reload.
func Start(ctx context.Context, cfg Config, cfgs []ClusterConfig, st *stats.Store, logger *zap.Logger) (*Manager, error) {
	m := &Manager{cfg: cfg, stats: st, logger: logger, ctx: ctx, slots: map[string]*clusterSlot{}, stops: map[*cluster]context.CancelFunc{}}
	built, err := m.build(cfgs)
	if err != nil {
		return nil, err
	}
	for name, c := range built {
		slot := &clusterSlot{}
		slot.cur.Store(c)
		m.slots[name] = slot
		m.start(c)
	}
	return m, nil
}

// build dials every cluster of cfgs; on failure nothing is left open.
func (m *Manager) build(cfgs []ClusterConfig) (map[string]*cluster, error) {
	out := map[string]*cluster{}
	for _, cc := range cfgs {
		c, err := newCluster(cc, m.cfg.UpstreamCredentials, m.cfg.InProcessServices, m.stats, m.logger.Named("upstream"))
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
func (m *Manager) start(c *cluster) {
	ctx, cancel := context.WithCancel(m.ctx)
	m.stopMu.Lock()
	m.stops[c] = cancel
	m.stopMu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		c.run(ctx)
	}()
}

// Reload re-reads the clusters configuration and, when it is valid, replaces every cluster: new
// calls go to the new hosts at once, calls in flight finish on the old ones, which are then closed.
// On error the running clusters stay, the error is logged and counted
// (cluster_manager.cds.update_rejected), and returned.
func (m *Manager) Reload() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cfgs, err := m.cfg.Clusters()
	if err == nil {
		for _, cc := range cfgs {
			if m.slots[cc.Name] == nil {
				err = errors.New("cluster " + cc.Name + " cannot be added by a reload")
			}
		}
	}
	var built map[string]*cluster
	if err == nil {
		built, err = m.build(cfgs)
	}
	if err != nil {
		m.stats.Counter("cluster_manager.cds.update_rejected").Inc()
		m.logger.Error("clusters reload rejected; the running clusters stay", zap.Error(err))
		return err
	}
	for name, c := range built {
		m.start(c)
		old := m.slots[name].cur.Swap(c)
		m.retire(old)
	}
	m.stats.Counter("cluster_manager.cds.update_success").Inc()
	m.logger.Info("clusters reloaded", zap.String("clusters_file", m.cfg.ClustersFile))
	return nil
}

// retire stops c's health checks and closes its connections once its calls in flight are done (at
// most the upstream timeout later).
func (m *Manager) retire(c *cluster) {
	c.retired.Store(true)
	m.stopMu.Lock()
	if stop := m.stops[c]; stop != nil {
		stop()
		delete(m.stops, c)
	}
	m.stopMu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		deadline := time.Now().Add(m.cfg.UpstreamTimeout + time.Second)
		for c.inflight.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		c.close()
	}()
}

// Conn is what the routes of the cluster name call: the current cluster of that name, whichever a
// reload put there. It is nil when no cluster has the name.
func (m *Manager) Conn(name string) grpc.ClientConnInterface {
	if slot := m.slots[name]; slot != nil {
		return slot
	}
	return nil
}

// Status describes the running clusters for /clusters, by name.
func (m *Manager) Status() []clusterstatus.Cluster {
	clusters := m.current()
	out := make([]clusterstatus.Cluster, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, c.report())
	}
	return out
}

// current lists the running clusters by name.
func (m *Manager) current() []*cluster {
	names := make([]string, 0, len(m.slots))
	for name := range m.slots {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*cluster, 0, len(names))
	for _, name := range names {
		out = append(out, m.slots[name].cur.Load())
	}
	return out
}

// Shutdown stops every loop and closes every cluster, after the gateway's servers have stopped.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopMu.Lock()
	for _, stop := range m.stops {
		stop()
	}
	m.stopMu.Unlock()
	m.wg.Wait()
	for _, c := range m.current() {
		c.close()
	}
}
